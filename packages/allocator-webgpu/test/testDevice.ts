import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, openWebGpuDevice } from '@stowage/allocator-webgpu';
import type { WebGpuAllocator, WebGpuOptions } from '@stowage/allocator-webgpu';

let shared: Promise<WebGpuContext | string> | undefined;

/** One Dawn device for the whole test run, or the reason there is none. */
export function sharedDevice(): Promise<WebGpuContext | string> {
  shared ??= openWebGpuDevice().then(
    (context) => context,
    (error: Error) => error.message,
  );
  return shared;
}

/** Skips the current test (printing why) when no WebGPU adapter can be opened here. */
export async function deviceOrSkip(context: Mocha.Context): Promise<WebGpuContext> {
  const device = await sharedDevice();
  if (typeof device === 'string') {
    console.log(`    skipped: no WebGPU adapter — ${device}`);
    context.skip();
  }
  return device as WebGpuContext;
}

/** An allocator on the shared device. */
export function allocatorOn(context: WebGpuContext, options: WebGpuOptions = {}): WebGpuAllocator {
  return createWebGpuAllocator(context, { limit: '512MiB', ...options });
}
