import type { DependencyContainer } from 'tsyringe';
import type { DeviceLike, Plugin, Runtime, Token } from '@stowage/core';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec } from '@stowage/core/plugin-kit';
import { CachingAllocator } from '@stowage/core';
import { createDeviceAllocator, registerDeviceAllocator, resolveDeviceOptions } from '@stowage/core/plugin-kit';
import type { LinkName, LinkProfile } from './LinkProfile.js';
import type { SimulatedHandle } from './SimulatedDevice.js';
import { SimulatedDevice } from './SimulatedDevice.js';

export interface SimulatedAllocatorOptions extends DeviceAllocatorOptions {
  /** The host link's profile (Note [Link profiles] in LinkProfile.ts). Default `'pcie4'`. */
  readonly link?: LinkName | LinkProfile;
  /** Device memory bandwidth in bytes per second, for device-to-device copies. Default 3.35e12 (an H100 SXM's HBM3). */
  readonly memoryBytesPerSecond?: number;
  /**
   * What the device holds, in bytes: its backend returns no segment past it, and `limit: { fraction }` is a
   * fraction of it. Unbounded when absent (a `limit` in bytes is then the only bound).
   */
  readonly capacityBytes?: number;
  /**
   * Keep addresses and timing, not bytes (Note [Address-only memory] in AddressMemory.ts): for working sets larger
   * than the machine's memory. Default false.
   */
  readonly addressOnly?: boolean;
}

type SimulatedOwnKey = 'link' | 'memoryBytesPerSecond' | 'capacityBytes' | 'addressOnly';

const OWN_KEYS: readonly SimulatedOwnKey[] = ['link', 'memoryBytesPerSecond', 'capacityBytes', 'addressOnly'];

/**
 * The simulated-time device as a device type: one device, sim:0; the caching engine over a SimulatedDevice, whose
 * pager puts it under LMS (`lms({ devices: ['sim'] })`). It reports a capacity only when given `capacityBytes`, so a
 * `limit` of `{ fraction }` is refused without one.
 */
function simulatedSpec(reportsCapacity: boolean): DeviceAllocatorSpec<SimulatedAllocatorOptions, SimulatedOwnKey, CachingAllocator<SimulatedHandle>> {
  return {
    deviceType: 'sim',
    deviceCount: 1,
    deviceOptions: OWN_KEYS,
    reportsCapacity,
    // The device's constructor is the one home of these checks; making one reserves nothing.
    checkDeviceOptions: (own) => void new SimulatedDevice(own),
    create: (device, engine, own) => new CachingAllocator(new SimulatedDevice({ ...own, device }), engine),
    provideServices: (allocator, provide) => provide(SIMULATED_DEVICE, allocator.backend as SimulatedDevice),
  };
}

function specOf(options: SimulatedAllocatorOptions | undefined): ReturnType<typeof simulatedSpec> {
  const capacityBytes: unknown = typeof options === 'object' && options !== null ? options.capacityBytes : undefined;
  return simulatedSpec(capacityBytes !== undefined);
}

/**
 * A simulated-time allocator outside a runtime (no reclaimers): the caching engine over a new SimulatedDevice,
 * which `simulatedDeviceOf` returns.
 * @throws InvalidArgumentError for a bad link, bandwidth, capacity, limit or engine option, or an unknown key
 */
export function createSimulatedAllocator(options: SimulatedAllocatorOptions = {}): CachingAllocator<SimulatedHandle> {
  return createDeviceAllocator(specOf(options), options);
}

/**
 * Registers the simulated device's allocator factory in a runtime's container (through `registerDeviceAllocator`).
 * @throws InvalidArgumentError for a bad option
 */
export function registerSimulatedAllocator(container: DependencyContainer, options: SimulatedAllocatorOptions = {}): void {
  registerDeviceAllocator(container, specOf(options), options);
}

/**
 * The simulated-time device plugin: `createRuntime({ plugins: [simulated({ link: 'pcie5', limit: '64MiB' }),
 * lms({ devices: ['sim'] })] })`, then `simulatedDeviceOf(runtime)` for its clock and timeline.
 * Each runtime gets a device of its own, made with its allocator.
 * @throws InvalidArgumentError for a bad option, at once
 */
export function simulated(options: SimulatedAllocatorOptions = {}): Plugin {
  resolveDeviceOptions(specOf(options), options);
  return { name: 'sim', register: (container) => registerSimulatedAllocator(container, options) };
}

/**
 * The SimulatedDevice behind a runtime's `device` (its device service, registered by `simulated()`: found whatever
 * adaptors or LMS wrap the allocator), or behind an allocator `createSimulatedAllocator` made; undefined for
 * anything else.
 */
export function simulatedDeviceOf(source: Runtime | CachingAllocator<SimulatedHandle>, device: DeviceLike = 'sim'): SimulatedDevice | undefined {
  if (source instanceof CachingAllocator) return source.backend instanceof SimulatedDevice ? source.backend : undefined;
  return source.service(SIMULATED_DEVICE, device);
}

/** The device service under which `simulated()` registers each device's SimulatedDevice. */
const SIMULATED_DEVICE: Token<SimulatedDevice> = Symbol('stowage.SimulatedDevice');
