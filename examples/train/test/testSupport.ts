import { expect } from 'chai';
import type { Runtime } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';

let shared: Promise<WebGpuContext | string> | undefined;

/** One Dawn device for the whole run (kept alive to its end), or the reason there is none. */
export function sharedDevice(): Promise<WebGpuContext | string> {
  shared ??= openWebGpuDevice().then(
    (context) => context,
    (error: Error) => error.message,
  );
  return shared;
}

/** The shared device, or skips the current test printing why. */
export async function deviceOrSkip(context: Mocha.Context): Promise<WebGpuContext> {
  const device = await sharedDevice();
  if (typeof device === 'string') {
    console.log(`    skipped: no WebGPU adapter — ${device}`);
    context.skip();
  }
  return device as WebGpuContext;
}

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
