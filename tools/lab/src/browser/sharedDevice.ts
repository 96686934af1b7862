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

/** WebGPU limits a test needs, by their `GPUSupportedLimits` names: at least these values. */
export type NeededLimits = Readonly<{ [Name in keyof GPUSupportedLimits]?: number }>;

/**
 * The limits of `needs` that `device` lacks, each as "name value (this device: its value)"; empty when it has them.
 * A limit the device does not know at all counts as missing. For an alignment limit (`min…`) less is more.
 */
export function missingLimits(device: GPUDevice, needs: NeededLimits): string[] {
  const limits = device.limits as unknown as Record<string, number | undefined>;
  return Object.entries(needs).flatMap(([name, needed]) => {
    const has = limits[name];
    const enough = has !== undefined && (name.startsWith('min') ? has <= needed! : has >= needed!);
    return enough ? [] : [`${name} ${needed} (this device: ${has ?? 'unknown'})`];
  });
}

/**
 * The shared device, or skips the current test (a mocha context) printing why: there is no adapter, or the device
 * lacks a limit of `needs` (each missing one named, with the device's value).
 */
export async function deviceOrSkip(context: { skip(): void }, needs: NeededLimits = {}): Promise<WebGpuContext> {
  const device = await sharedDevice();
  if (typeof device === 'string') {
    console.log(`    skipped: no WebGPU adapter — ${device}`);
    context.skip();
  }
  const missing = missingLimits((device as WebGpuContext).device, needs);
  if (missing.length > 0) {
    console.log(`    skipped: the WebGPU device (${(device as WebGpuContext).adapterInfo}) lacks ${missing.join(', ')}`);
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
