import { DeviceError } from '@stowage/core';

/** What the operating system said about a failed call. */
export interface SharedMemoryErrorDetails {
  /** The libc function that failed: `shm_open`, `mmap`, `pidfd_getfd`, …. */
  readonly call: string;
  /** The numeric errno. */
  readonly errno: number;
  /** errno's symbolic name: `ENOENT`, `EEXIST`, `EACCES`, …. */
  readonly errnoName: string;
  /** What the call was about: a shared-memory name, a pid, a file descriptor. */
  readonly target: string;
  /** What to do about it, one clause (may be empty). */
  readonly hint: string;
}

/**
 * A call for shared memory or another process's resources failed. The Stowage `code` is `DEVICE_ERROR` (the closed
 * union has no code for the host operating system; shared memory is the host device's memory); match on
 * {@link errnoName} for the reason.
 */
export class SharedMemoryError extends DeviceError implements SharedMemoryErrorDetails {
  readonly call: string;
  readonly errno: number;
  readonly errnoName: string;
  readonly target: string;
  readonly hint: string;

  constructor(details: SharedMemoryErrorDetails, options?: ErrorOptions) {
    super(`${details.call}(${details.target}) failed with ${details.errnoName} (${details.errno})${details.hint ? `: ${details.hint}` : ''}.`, options);
    this.call = details.call;
    this.errno = details.errno;
    this.errnoName = details.errnoName;
    this.target = details.target;
    this.hint = details.hint;
  }
}

/** True when `error` is a {@link SharedMemoryError}, optionally with the given errno name (`ENOENT`). */
export function isSharedMemoryError(error: unknown, errnoName?: string): error is SharedMemoryError {
  return error instanceof SharedMemoryError && (errnoName === undefined || error.errnoName === errnoName);
}
