import { stat } from 'node:fs/promises';
import { InvalidArgumentError } from '@stowage/core';
import { MissingFileError } from './MissingFileError.js';

/**
 * Checks that `path` names a file to read, before a reader opens it, so that a missing path or a directory is a
 * typed error saying what to give rather than the file system's ENOENT or EISDIR.
 * @param expected what the file should be, completing "give the path of …"
 * @throws as {@link inputFileError}: MissingFileError, or InvalidArgumentError for a directory or a file this
 * process may not read; InvalidArgumentError for a path with a NUL character
 */
export async function checkInputFile(path: string, expected: string): Promise<void> {
  if (path.includes('\0')) throw new InvalidArgumentError('path', path, `the path of ${expected} (with no NUL character)`);
  let isDirectory: boolean;
  try {
    isDirectory = (await stat(path)).isDirectory();
  } catch (error) {
    throw inputFileError(path, expected, error);
  }
  if (isDirectory) throw inputFileError(path, expected, Object.assign(new Error(`EISDIR: ${path} is a directory`), { code: 'EISDIR' }));
}

/**
 * The typed error for the file system's `error` reading `path`: MissingFileError (`FILE_NOT_FOUND`) for ENOENT or
 * ENOTDIR; InvalidArgumentError naming `path` for a directory (EISDIR: `listTraces` lists a directory's traces)
 * or a file this process may not read (EACCES, EPERM); `error` itself otherwise.
 */
export function inputFileError(path: string, expected: string, error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return new MissingFileError(path, expected, { cause: error });
  if (code === 'EISDIR') return new InvalidArgumentError('path', path, `the path of ${expected}, not a directory (listTraces lists the traces under a directory)`, { cause: error });
  if (code === 'EACCES' || code === 'EPERM') return new InvalidArgumentError('path', path, `the path of ${expected} that this process may read (${code})`, { cause: error });
  return error;
}
