import type { DependencyContainer } from 'tsyringe';
import type { Allocator } from './Allocator.js';
import type { Device } from './Device.js';
import type { DeviceServices } from './DeviceServices.js';
import type { MemoryReclaimer } from './MemoryReclaimer.js';
import type { Token } from './Token.js';

/** What a runtime gives a factory for each allocator it makes. */
export interface AllocatorContext {
  /** The runtime's container, for factories that resolve further services. */
  readonly container: DependencyContainer;
  /**
   * The out-of-memory reclaimers registered in the runtime, in the order the engine must call them: every
   * `IpcCollector`, then every `LmsReclaimer`, as the runtime's plugins registered them. Callable without `this`.
   */
  reclaimers(): readonly MemoryReclaimer[];
  /**
   * Registers a device service of `device` (Note [Device services]): a factory calls it from `create`, before it
   * returns the allocator, once per (device, token).
   * @throws InvalidArgumentError for a token already registered for that device, or a missing service
   */
  provide<T>(device: Device, token: Token<T>, service: T): void;
}

/**
 * Makes the allocator for each device of one type, on first use. Multi-registered: a plugin registers one per
 * device type it serves; for a type registered twice, the later registration wins. A device plugin over the caching
 * engine registers its factory through `registerDeviceAllocator`, which gives the engine the context's reclaimers
 * and the plugin's budget, and checks device indices.
 */
export interface AllocatorFactory {
  readonly deviceType: string;
  /**
   * @throws BackendUnavailableError when the device does not exist or its driver cannot be used
   */
  create(device: Device, context: AllocatorContext): Allocator;
}

export const AllocatorFactory: Token<AllocatorFactory> = Symbol('stowage.AllocatorFactory');
export const AllocatorContext: Token<AllocatorContext> = Symbol('stowage.AllocatorContext');

/**
 * Wraps every allocator a runtime makes for one device type, after its factory made it: how adaptors
 * (`LimitingAllocator`, `StatisticsAllocator`, …) join a composed runtime. Multi-registered; applied in
 * registration order, so the last registered is outermost.
 */
export interface AllocatorDecorator {
  readonly deviceType: string;
  /**
   * Applied after every decorator without it, whatever the registration order: LMS's, so that the allocator the
   * runtime hands out answers `asLmsStorage` even when a third party's wrapper does not forward it.
   */
  readonly outermost?: boolean;
  /**
   * `services` are the device's (its factory registered them): a decorator reads them, never the chain.
   * `provide` registers a service of the decorator's own for the device (LMS's residency), under the same rules as
   * the factory's (Note [Device services]).
   */
  wrap(allocator: Allocator, device: Device, services: DeviceServices, provide: <T>(token: Token<T>, service: T) => void): Allocator;
}

export const AllocatorDecorator: Token<AllocatorDecorator> = Symbol('stowage.AllocatorDecorator');
