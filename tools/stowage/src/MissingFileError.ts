import { StowageError } from '@stowage/core';

/** An input file named on the command line does not exist (or cannot be read). Nothing was written. */
export class MissingFileError extends StowageError {
  /**
   * @param path the path as the user gave it
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
