import type { StowageErrorCode } from '@stowage/core';
import { StowageError } from '@stowage/core';
import type { MalformedPickleError, UnsafePickleError } from '@stowage/snapshot-pickle';

/**
 * An input that is a pickle the reader refused: truncated or corrupt (`MALFORMED_PICKLE`), or asking to import or
 * call code (`UNSAFE_PICKLE`). Its code is the reader's, its message names the file, and the reader's error is
 * its `cause`. Nothing was executed or written.
 */
export class UnreadablePickleError extends StowageError {
  /**
   * @param path the input as the user gave it
   * @param cause the reader's error
   */
  constructor(
    readonly path: string,
    cause: MalformedPickleError | UnsafePickleError,
  ) {
    super(cause.code as Extract<StowageErrorCode, 'MALFORMED_PICKLE' | 'UNSAFE_PICKLE'>, `${path}: ${cause.message}`, { cause });
  }
}
