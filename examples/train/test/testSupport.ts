import { expect } from 'chai';
import type { Runtime } from '@stowage/core';
import { CudaDriver, DEFAULT_LIBCUDA_PATHS } from '@stowage/allocator-cuda';
import { buildStandIn } from '@stowage/allocator-cuda/testing';

export { deviceOrSkip } from '@stowage/allocator-webgpu/testing';

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
  const chosen = process.env['STOWAGE_LIBCUDA'];
  if (chosen !== undefined && chosen !== '') return chosen;
  try {
    return CudaDriver.open({ paths: DEFAULT_LIBCUDA_PATHS }).path;
  } catch {
    const build = buildStandIn();
    if (build.path !== null) return build.path;
    console.log(`    skipped: no libcuda could be loaded, and the stand-in could not be built: ${build.reason}`);
    return context.skip();
  }
}
