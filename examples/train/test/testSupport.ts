import { expect } from 'chai';
import type { Runtime } from '@stowage/core';

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
