import { statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** The environment variable that names the trace directory, overriding the search. */
export const TRACE_ROOT_ENV = 'STOWAGE_TRACES';

/**
 * Finds the directory of shared allocation traces: `$STOWAGE_TRACES` when set (returned if it is a directory,
 * else undefined), otherwise the first `<dir>/shared/traces` that is a directory, for `dir` from `startDir` up to
 * the file system root. From a checkout at `/work/main` that finds `/work/shared/traces` (the traces live beside
 * the repository, never inside it).
 * @returns the absolute path, or undefined when there is none
 */
export function findTraceRoot(startDir: string = process.cwd(), env: NodeJS.ProcessEnv = process.env): string | undefined {
  const named = env[TRACE_ROOT_ENV];
  if (named !== undefined && named !== '') {
    const root = resolve(named);
    return isDirectory(root) ? root : undefined;
  }
  for (let dir = resolve(startDir); ; dir = dirname(dir)) {
    const candidate = join(dir, 'shared', 'traces');
    if (isDirectory(candidate)) return candidate;
    if (dirname(dir) === dir) return undefined;
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
