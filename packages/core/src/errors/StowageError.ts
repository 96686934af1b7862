/**
 * The closed set of error codes Stowage throws. A code is stable across releases; match on it rather than on
 * the class or the message.
 */
export type StowageErrorCode =
  | 'OUT_OF_MEMORY'
  | 'INVALID_ARGUMENT'
  | 'DOUBLE_FREE'
  | 'FOREIGN_POINTER'
  | 'USE_AFTER_RELEASE'
  | 'DEVICE_MISMATCH'
  | 'BACKEND_UNAVAILABLE'
  | 'DEVICE_ERROR'
  | 'DISPOSED'
  | 'DISPOSE_FAILED'
  | 'PAGE_IN_PENDING'
  | 'MALFORMED_PICKLE'
  | 'UNSAFE_PICKLE'
  | 'FILE_NOT_FOUND'
  | 'UNKNOWN_FORMAT';

/** Base class of every error Stowage throws on purpose. */
export class StowageError extends Error {
  constructor(
    readonly code: StowageErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** True when `error` is a {@link StowageError}, optionally with the given code. */
export function isStowageError(error: unknown, code?: StowageErrorCode): error is StowageError {
  return error instanceof StowageError && (code === undefined || error.code === code);
}
