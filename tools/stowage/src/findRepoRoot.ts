import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MissingFileError } from '@stowage/lab/replay';

/**
 * The Stowage checkout this command belongs to: the nearest directory holding `pnpm-workspace.yaml` above this
 * module (the command's own checkout), else above `cwd`.
 * @throws MissingFileError when neither lies in a checkout (`demo` and `bench` run the checkout's built entries)
 */
export function findRepoRoot(cwd: string = process.cwd()): string {
  for (const start of [dirname(fileURLToPath(import.meta.url)), cwd]) {
    for (let dir = resolve(start); ; dir = dirname(dir)) {
      if (existsSync(join(dir, 'pnpm-workspace.yaml')) && existsSync(join(dir, 'package.json'))) return dir;
      if (dirname(dir) === dir) break;
    }
  }
  throw new MissingFileError(join(cwd, 'pnpm-workspace.yaml'), 'a Stowage checkout: run this command inside one (git clone, pnpm install)');
}
