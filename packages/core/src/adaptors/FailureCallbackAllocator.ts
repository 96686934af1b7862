import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import type { DataPtr } from '../storage/DataPtr.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import type { ForwardingAllocatorOptions } from '../allocators/ForwardingAllocator.js';
import { ForwardingAllocator } from '../allocators/ForwardingAllocator.js';
import { checkUpstream } from '../internal/checkUpstream.js';
import { checkAdaptorOptions } from './checkAdaptorOptions.js';

/** What a {@link FailureCallback} is told about a failed attempt. */
export interface AllocationFailure {
  /** The bytes the failed `allocate` asked for. */
  readonly requestedBytes: number;
  /** Which attempt failed: 1 for the first call to the upstream, 2 for the first retry, and so on. */
  readonly attempt: number;
  /** The upstream's error for this attempt. */
  readonly error: OutOfMemoryError;
}

/**
 * Called when the upstream runs out of memory. Returns true to retry the allocation (having freed something,
 * or expecting another party to), false to give up and let the error propagate.
 */
export type FailureCallback = (failure: AllocationFailure) => boolean;

/** Options of a {@link FailureCallbackAllocator}. */
export type FailureCallbackAllocatorOptions = ForwardingAllocatorOptions;

/**
 * Lets a caller free memory and retry when the upstream runs out, after RMM's
 * `failure_callback_resource_adaptor`: the hook LMS (reclaim inactive storages) and IPC (collect the limbo) use.
 *
 * `allocate` calls the upstream; when that throws OutOfMemoryError, it calls `callback` with the attempt number,
 * and retries while the callback returns `true`. When it returns anything else, the last OutOfMemoryError is
 * rethrown. Any other error, from the upstream or thrown by the callback, propagates at once without a retry.
 * The callback runs synchronously and may free pointers of this adaptor or any other. The upstream reports each
 * failed attempt itself (an `outOfMemory` event and a `num_ooms` count per attempt).
 *
 * A callback that returns true without ever freeing memory retries forever: it owns the decision to stop, so
 * it should bound `attempt`.
 */
export class FailureCallbackAllocator extends ForwardingAllocator {
  readonly #callback: FailureCallback;

  /**
   * @throws InvalidArgumentError when `upstream` is not an allocator, `callback` is not a function, or the options
   * are bad (see `checkAdaptorOptions`)
   */
  constructor(upstream: Allocator, callback: FailureCallback, options: FailureCallbackAllocatorOptions = {}) {
    checkUpstream(upstream);
    if (typeof callback !== 'function') throw new InvalidArgumentError('callback', callback, 'a function ({ requestedBytes, attempt, error }) => boolean');
    super(upstream, checkAdaptorOptions(options));
    this.#callback = callback;
  }

  /**
   * Allocates through the upstream, retrying after OutOfMemoryError while the callback returns true.
   * @throws OutOfMemoryError from the last attempt, once the callback returned false
   * @throws whatever else the upstream or the callback throws, at once
   */
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    for (let attempt = 1; ; attempt++) {
      try {
        return super.allocate(nbytes, options);
      } catch (error) {
        if (!(error instanceof OutOfMemoryError)) throw error;
        if (this.#callback({ requestedBytes: nbytes, attempt, error }) !== true) throw error;
      }
    }
  }
}
