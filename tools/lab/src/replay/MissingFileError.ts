import { StowageError } from '@stowage/core';

/** A file named by the caller (a trace, a log, a snapshot) does not exist. Nothing was read. */
export class MissingFileError extends StowageError {
  /**
   * @param path the path as the caller gave it
   * @param expected what the file should have been, completing "give the path of …"
   */
  constructor(
    readonly path: string,
    readonly expected: string,
    options?: ErrorOptions,
  ) {
    super('FILE_NOT_FOUND', `No file at ${path}; give the path of ${expected}.`, options);
  }
}
