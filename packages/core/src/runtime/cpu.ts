import type { DependencyContainer } from 'tsyringe';
import type { Allocator } from '../contracts/Allocator.js';
import { AllocatorFactory, type AllocatorContext } from '../contracts/AllocatorFactory.js';
import { CpuMemoryBackend, type HostBuffer } from '../backends/CpuMemoryBackend.js';
import { CachingAllocator } from '../engine/CachingAllocator.js';
import type { CachingAllocatorOptions } from '../engine/CachingAllocatorOptions.js';
import type { Device } from '../contracts/Device.js';
import { formatDevice } from '../contracts/Device.js';
import { BackendUnavailableError } from '../errors/BackendUnavailableError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkOptions } from '../internal/validate.js';
import { parseBytes } from '../units/formatBytes.js';
import type { Plugin } from '../contracts/Plugin.js';

export interface CpuAllocatorOptions extends Omit<CachingAllocatorOptions, 'memoryLimit'> {
  /** Back every allocation with a SharedArrayBuffer (per-allocation `{ shared }` overrides). Default false. */
  readonly shared?: boolean;
  /**
   * A host memory budget, in bytes or as text (`'512MiB'`): the caching engine reserves at most this much and
   * throws OutOfMemoryError past it. Segments are 2 MiB or more, so a budget under that serves nothing.
   */
  readonly limit?: number | string;
}

/**
 * The host allocator: the caching engine over ArrayBuffer (or SharedArrayBuffer) segments. The embedded
 * default of every runtime. Options other than `shared` and `limit` go to the engine.
 * @throws InvalidArgumentError for a limit that is not a byte count, or a bad engine option
 */
export function createCpuAllocator(options: CpuAllocatorOptions = {}): CachingAllocator<HostBuffer> {
  const { shared, limit, ...engine } = checkOptions('options', options);
  let capacityBytes: number | undefined;
  if (limit !== undefined) {
    capacityBytes = parseBytes(limit);
    if (capacityBytes === undefined) throw new InvalidArgumentError('limit', limit, "a byte count such as 1073741824 or '1GiB'");
  }
  return new CachingAllocator(new CpuMemoryBackend({ shared: shared ?? false, capacityBytes }), engine);
}

/** Registers the CPU allocator factory in a runtime's container. */
export function registerCpuAllocator(container: DependencyContainer, options: CpuAllocatorOptions = {}): void {
  if (options.limit !== undefined && parseBytes(options.limit) === undefined) {
    throw new InvalidArgumentError('limit', options.limit, "a byte count such as 1073741824 or '1GiB'");
  }
  const factory: AllocatorFactory = {
    deviceType: 'cpu',
    create(device: Device, context: AllocatorContext): Allocator {
      if (device.index !== 0) throw new BackendUnavailableError(`There is one host device, cpu:0; ${formatDevice(device)} does not exist.`);
      return createCpuAllocator({ reclaimers: () => context.reclaimers(), ...options });
    },
  };
  container.register(AllocatorFactory, { useValue: factory });
}

/** The CPU allocator plugin: `createRuntime({ plugins: [cpu({ shared: true })] })`. */
export function cpu(options: CpuAllocatorOptions = {}): Plugin {
  checkOptions('options', options);
  return { name: 'cpu', register: (container) => registerCpuAllocator(container, options) };
}
