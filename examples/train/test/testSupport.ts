import { expect } from 'chai';
import type { Runtime } from '@stowage/core';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

export { deviceOrSkip } from '@stowage/lab/browser';

export function allocatedBytes(rt: Runtime): number {
  return rt.allocator('cpu').memoryStats()['allocated_bytes.all.current'];
}

/** What `promise` rejected with; fails when it resolved. */
export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return expect.fail('expected a rejection');
}

/**
 * The libcuda the CUDA tests run on, as @stowage/allocator-cuda's own tests choose it: `STOWAGE_LIBCUDA` when set;
 * otherwise a real libcuda when one loads; otherwise the stand-in, built here (memory calls and copies, no kernels).
 * Skips the calling test or hook, saying why, only when none can be had.
 */
export function libcudaOrSkip(context: Mocha.Context): string {
  const lib = testLibcuda();
  if (typeof lib !== 'string') return lib.path;
  console.log(`    skipped: ${lib}`);
  return context.skip();
}
