import { PageInPendingError } from '@stowage/lms';

/**
 * A tfjs kernel needed, inside a synchronous step, a tensor that LMS reclaimed earlier in the same step and whose
 * bytes are still on their way to host memory (Note [LMS inside a synchronous step] in KernelPins.ts):
 * it cannot be brought back before the step returns to the event loop. Nothing of the kernel ran. Code
 * `PAGE_IN_PENDING`, as the `PageInPendingError` it is (its `cause`).
 */
export class TensorBytesInFlightError extends PageInPendingError {
  constructor(byteLength: number, options?: ErrorOptions) {
    super(byteLength);
    if (options?.cause !== undefined) this.cause = options.cause;
    this.message =
      `A tfjs kernel needs a ${byteLength}-byte tensor that LMS paged out earlier in this synchronous step, and its bytes are still being copied to host memory (WebGPU delivers them only when the event loop runs), so it cannot be brought back inside the step. ` +
      'Raise the budget (webgpu({ limit })) to at least the step\'s working set, or end every step with `await backend.endLmsStep()` so that LMS learns the step and keeps such tensors resident.';
  }
}
