import { StowageError } from '@stowage/core';

/**
 * A reclaimed storage was needed at once (a synchronous `pin`, `data()`, `mutableData()`) while its bytes were
 * still on their way to host memory (a WebGPU page-out waits for `mapAsync`). Nothing changed: await
 * `pinAsync(...)` or `storage.lms.ready()` first, then retry. Never a read of stale bytes.
 */
export class PageInPendingError extends StowageError {
  constructor(readonly byteLength: number) {
    super(
      'PAGE_IN_PENDING',
      `A reclaimed ${byteLength}-byte storage is needed now, but its bytes are still being copied to host memory (the device's page-out completes asynchronously). Use \`await pinAsync(...)\` (or \`await storage.lms.ready()\`) before touching it.`,
    );
  }
}
