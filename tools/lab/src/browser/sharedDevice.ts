import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';

let shared: Promise<WebGpuContext | string> | undefined;

/** One WebGPU device for a whole test run (kept alive to its end), or the reason there is none. */
export function sharedDevice(): Promise<WebGpuContext | string> {
  shared ??= openWebGpuDevice().then(
    (context) => context,
    (error: Error) => error.message,
  );
  return shared;
}

/** The shared device, or skips the current test (a mocha context) printing why. */
export async function deviceOrSkip(context: { skip(): void }): Promise<WebGpuContext> {
  const device = await sharedDevice();
  if (typeof device === 'string') {
    console.log(`    skipped: no WebGPU adapter — ${device}`);
    context.skip();
  }
  return device as WebGpuContext;
}

/**
 * A device of the test's own (for tests that destroy it or wrap its methods), or skips the test printing why. The
 * caller keeps the context alive to the end of the run (Dawn fails if the GPU object goes first).
 */
export async function ownDeviceOrSkip(context: { skip(): void }): Promise<WebGpuContext> {
  const own = await openWebGpuDevice().catch((error: Error) => {
    console.log(`    skipped: no WebGPU adapter for a device of its own — ${error.message}`);
    return undefined;
  });
  if (own === undefined) context.skip();
  return own!;
}
