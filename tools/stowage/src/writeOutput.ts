import { accessSync, constants, statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { InvalidArgumentError } from '@stowage/core';
import type { CliContext } from './CliContext.js';

/**
 * An output path the command cannot write: its directory is missing or not writable, or it is a directory. The
 * message says so in one line (no `--help` hint: the flags are right, the path is not).
 */
export class UnwritableOutputError extends InvalidArgumentError {}

/**
 * Checks, before any work, that `path` (given to `flag`) can be written: `-` and undefined (standard output)
 * always can; a file needs an existing, writable directory and must not itself be a directory.
 * @throws UnwritableOutputError saying which
 */
export function checkOutputPath(flag: string, path: string | undefined): void {
  if (path === undefined || path === '-') return;
  if (path === '' || path.includes('\0')) throw new UnwritableOutputError(flag, path, 'a file path (- for standard output)');
  const full = resolve(path);
  const dir = dirname(full);
  let problem: string | undefined;
  try {
    if (!statSync(dir).isDirectory()) problem = `${dir} is not a directory`;
    else if (statSync(full, { throwIfNoEntry: false })?.isDirectory() === true) problem = 'it is a directory';
    else accessSync(dir, constants.W_OK);
  } catch (error) {
    const code = (error as { code?: string }).code;
    problem = code === 'ENOENT' || code === 'ENOTDIR' ? `no directory ${dir}` : `${dir} is not writable (${code ?? (error as Error).message})`;
  }
  if (problem !== undefined) throw new UnwritableOutputError(flag, path, `a file in an existing, writable directory (${problem})`);
}

/**
 * Writes `content` to the file `path`, or to standard output when `path` is `-` or undefined (binary content
 * to a pipe only: a terminal gets a note instead).
 * @throws UnwritableOutputError when the file cannot be written (no such directory, no permission)
 */
export function writeOutput(context: CliContext, path: string | undefined, content: string | Uint8Array): void {
  if (path !== undefined && path !== '-') {
    try {
      writeFileSync(path, content);
    } catch (error) {
      const reason = (error as { code?: string }).code ?? (error as Error).message;
      throw new UnwritableOutputError('-o', path, `a file in an existing, writable directory (writing failed: ${reason})`, { cause: error });
    }
    return;
  }
  if (typeof content === 'string') context.out(content);
  else if (!context.outBytes(content)) context.err('Not writing binary output to standard output here (a terminal); give -o <file>.\n');
}
