import { StowageError } from './StowageError.js';

/**
 * `Runtime#dispose()` freed everything, but releasing some storages threw on the way (a storage still pinned under
 * LMS, a hook that threw). `errors` holds what each release threw, in order; the first one's message is repeated.
 */
export class DisposeFailedError extends StowageError {
  constructor(
    readonly errors: readonly unknown[],
    options?: ErrorOptions,
  ) {
    const first = errors[0] instanceof Error ? errors[0].message : String(errors[0]);
    super('DISPOSE_FAILED', `Releasing ${errors.length} storage(s) failed while the runtime was disposed; its memory was freed anyway. The first: ${first}`, options);
  }
}
