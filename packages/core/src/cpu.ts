import type { DependencyContainer } from 'tsyringe';
import type { Allocator } from './Allocator.js';
import { AllocatorFactory } from './AllocatorFactory.js';
import { CpuMemoryBackend } from './CpuMemoryBackend.js';
import type { Device } from './Device.js';
import { formatDevice } from './Device.js';
import { BackendUnavailableError } from './errors/BackendUnavailableError.js';
import { InvalidArgumentError } from './errors/InvalidArgumentError.js';
import { parseBytes } from './formatBytes.js';
import { makeDirectAllocator } from './makeAllocator.js';
import type { Plugin } from './Plugin.js';

export interface CpuAllocatorOptions {
  /** Back every allocation with a SharedArrayBuffer (per-allocation `{ shared }` overrides). Default false. */
  readonly shared?: boolean;
  /** A host memory budget, in bytes or as text (`'512MiB'`); allocations past it throw OutOfMemoryError. */
  readonly limit?: number | string;
}

/**
 * The host allocator: ArrayBuffer (or SharedArrayBuffer) memory. The embedded default of every runtime.
 * @throws InvalidArgumentError for a limit that is not a byte count
 */
export function createCpuAllocator(options: CpuAllocatorOptions = {}): Allocator {
  let capacityBytes: number | undefined;
  if (options.limit !== undefined) {
    capacityBytes = parseBytes(options.limit);
    if (capacityBytes === undefined) throw new InvalidArgumentError('limit', options.limit, "a byte count such as 1073741824 or '1GiB'");
  }
  return makeDirectAllocator(new CpuMemoryBackend({ shared: options.shared ?? false, capacityBytes }));
}

/** Registers the CPU allocator factory in a runtime's container. */
export function registerCpuAllocator(container: DependencyContainer, options: CpuAllocatorOptions = {}): void {
  if (options.limit !== undefined && parseBytes(options.limit) === undefined) {
    throw new InvalidArgumentError('limit', options.limit, "a byte count such as 1073741824 or '1GiB'");
  }
  const factory: AllocatorFactory = {
    deviceType: 'cpu',
    create(device: Device): Allocator {
      if (device.index !== 0) throw new BackendUnavailableError(`There is one host device, cpu:0; ${formatDevice(device)} does not exist.`);
      return createCpuAllocator(options);
    },
  };
  container.register(AllocatorFactory, { useValue: factory });
}

/** The CPU allocator plugin: `createRuntime({ plugins: [cpu({ shared: true })] })`. */
export function cpu(options: CpuAllocatorOptions = {}): Plugin {
  return { name: 'cpu', register: (container) => registerCpuAllocator(container, options) };
}
