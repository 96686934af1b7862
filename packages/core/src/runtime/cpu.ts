import type { DependencyContainer } from 'tsyringe';
import { CpuMemoryBackend, type HostBuffer } from '../backends/CpuMemoryBackend.js';
import { CachingAllocator } from '../engine/CachingAllocator.js';
import type { Plugin } from '../contracts/Plugin.js';
import { checkBoolean } from '../validation/validate.js';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec } from './registerDeviceAllocator.js';
import { createDeviceAllocator, registerDeviceAllocator, resolveDeviceOptions } from './registerDeviceAllocator.js';

export interface CpuAllocatorOptions extends DeviceAllocatorOptions {
  /** Back every allocation with a SharedArrayBuffer (per-allocation `{ shared }` overrides). Default false. */
  readonly shared?: boolean;
}

/** The host as a device: one device, cpu:0; the caching engine over ArrayBuffer (or SharedArrayBuffer) segments. */
const CPU: DeviceAllocatorSpec<CpuAllocatorOptions, 'shared', CachingAllocator<HostBuffer>> = {
  deviceType: 'cpu',
  deviceCount: 1,
  deviceOptions: ['shared'],
  reportsCapacity: false,
  checkDeviceOptions: (own) => void checkBoolean('options.shared', own.shared),
  create: (_device, engine, own) => new CachingAllocator(new CpuMemoryBackend({ shared: own.shared ?? false }), engine),
};

/**
 * The host allocator: the caching engine over ArrayBuffer (or SharedArrayBuffer) segments. The embedded
 * default of every runtime. `limit` is the engine's budget (a host memory budget: segments are 2 MiB or more,
 * so a budget under that serves nothing); options other than `shared` and `limit` go to the engine.
 * @throws InvalidArgumentError for a limit that is not a byte count, a `shared` that is not a boolean, a bad
 * engine option, or a key that is no option (naming the nearest one)
 */
export function createCpuAllocator(options: CpuAllocatorOptions = {}): CachingAllocator<HostBuffer> {
  return createDeviceAllocator(CPU, options);
}

/**
 * Registers the CPU allocator factory in a runtime's container (through `registerDeviceAllocator`).
 * @throws InvalidArgumentError for a bad option
 */
export function registerCpuAllocator(container: DependencyContainer, options: CpuAllocatorOptions = {}): void {
  registerDeviceAllocator(container, CPU, options);
}

/**
 * The CPU allocator plugin: `createRuntime({ plugins: [cpu({ shared: true })] })`.
 * @throws InvalidArgumentError for a bad option, at once
 */
export function cpu(options: CpuAllocatorOptions = {}): Plugin {
  resolveDeviceOptions(CPU, options);
  return { name: 'cpu', register: (container) => registerCpuAllocator(container, options) };
}
