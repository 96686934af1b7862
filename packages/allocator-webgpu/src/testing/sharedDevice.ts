import type { WebGpuContext } from '../openWebGpuDevice.js';
import { openWebGpuDevice } from '../openWebGpuDevice.js';

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
