import type { DependencyContainer } from 'tsyringe';
import type { Allocator } from '../contracts/Allocator.js';
import { AllocatorFactory } from '../contracts/AllocatorFactory.js';
import type { Device } from '../contracts/Device.js';
import { formatDevice } from '../contracts/Device.js';
import type { CachingAllocatorOptions } from '../engine/CachingAllocatorOptions.js';
import { CACHING_OPTION_KEYS, resolveCachingOptions } from '../engine/CachingAllocatorOptions.js';
import { BackendUnavailableError } from '../errors/BackendUnavailableError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { parseBytes } from '../units/formatBytes.js';
import { checkOptions } from '../validation/validate.js';
import type { MemoryBackend } from '../contracts/MemoryBackend.js';
import { BlockInspector } from '../contracts/BlockInspector.js';
import { Pager } from '../contracts/Pager.js';
import type { Token } from '../contracts/Token.js';
import { CachingAllocator } from '../engine/CachingAllocator.js';

/**
 * What every device plugin takes besides its own options: its budget (`limit`), and the caching engine's options,
 * which pass through to the engine unchanged. The engine's `reclaimers` are not among them: a device allocator in
 * a runtime always runs the runtime's; and the engine's `memoryLimit` is spelled `limit` here.
 */
export interface DeviceAllocatorOptions extends Omit<CachingAllocatorOptions, 'memoryLimit' | 'reclaimers'> {
  /**
   * The allocator's memory budget, which becomes the caching engine's `memoryLimit`: bytes, text such as `'512MiB'`,
   * or `{ fraction }` of the capacity the device reports. The same on every device: reserved bytes never exceed
   * it, and a request past it runs the out-of-memory chain (free the cache, IPC collect, LMS reclaim) before
   * `OutOfMemoryError`. Default: the plugin's (none on CPU, 2 GiB on WebGPU).
   */
  readonly limit?: number | string | { readonly fraction: number };
}

/**
 * One device type as a plugin serves it: the one thing a device package writes to join a runtime.
 * `O` is the plugin's options type, `K` the keys of `O` that belong to the device (they never reach the engine).
 */
export interface DeviceAllocatorSpec<O extends DeviceAllocatorOptions, K extends keyof O, A extends Allocator = Allocator> {
  /** The device type served: `'cpu'`, `'webgpu'`, `'cuda'`, or a third party's. */
  readonly deviceType: string;
  /** Devices of this type this plugin serves: indices 0 … deviceCount − 1. */
  readonly deviceCount: number;
  /** The option keys the device owns; every other key but `limit` is the engine's. */
  readonly deviceOptions: readonly K[];
  /** The budget when the caller gives no `limit`; none when absent. */
  readonly defaultLimit?: number | string;
  /**
   * Checks the device's own options (`own`: only the keys in `deviceOptions`, undefined ones left out) when the
   * plugin's options are resolved, before any device is opened.
   * @throws InvalidArgumentError naming the option (`options.shared`) that is bad
   */
  readonly checkDeviceOptions?: (own: Pick<O, K>) => void;
  /**
   * Engine options this device does not take (WebGPU cannot map pages: `['expandableSegments']`); giving one is
   * refused as an unknown key. Default: none.
   */
  readonly engineOptionsLeftOut?: readonly string[];
  /**
   * False when the device reports no capacity (the host, WebGPU): a `limit` of `{ fraction }` is then refused when
   * the options are checked, since there is nothing to take a fraction of. Default true.
   */
  readonly reportsCapacity?: boolean;
  /**
   * Makes the allocator for `device` (an index already checked): the caching engine over the device's backend,
   * with `engine` as its options (the plugin may put its own defaults under them, never over them), and device
   * services beside it. `engine.memoryLimit` is the budget; `budgetBytes` is the same in bytes, when it is bytes.
   */
  create(device: Device, engine: CachingAllocatorOptions, own: Pick<O, K>, budgetBytes: number | undefined): A;
  /**
   * Registers the device's services beyond the engine's own (Note [Device services]) for an allocator `create`
   * made in a runtime. The engine's are registered without it: the engine as BlockInspector, its backend's pager
   * as Pager.
   */
  provideServices?(allocator: A, provide: <T>(token: Token<T>, service: T) => void): void;
}

/** A device plugin's options after checking: the device's own, and the engine's (with the budget as `memoryLimit`). */
export interface DeviceAllocatorSettings<O, K extends keyof O> {
  readonly own: Pick<O, K>;
  readonly engine: CachingAllocatorOptions;
  /** The budget in bytes; undefined without one, or when it is a fraction of a capacity not yet known. */
  readonly budgetBytes: number | undefined;
}

/**
 * Checks a device plugin's options and splits them (the one place that does, for every device): the device's
 * own keys, and the engine's options with `limit` as `memoryLimit`. Engine options are checked here too, so a bad
 * one is reported when the plugin is made, not on first use.
 * @throws InvalidArgumentError for options that are not an object, a `limit` that is not a byte count or a
 * fraction in (0, 1], a `reclaimers` or `memoryLimit` key (see {@link DeviceAllocatorOptions}), a key that is
 * neither the engine's, the device's nor `limit` (naming the nearest known key), or a bad engine option
 */
export function resolveDeviceOptions<O extends DeviceAllocatorOptions, K extends keyof O>(
  spec: Pick<DeviceAllocatorSpec<O, K>, 'deviceType' | 'deviceOptions' | 'defaultLimit' | 'checkDeviceOptions' | 'engineOptionsLeftOut' | 'reportsCapacity'>,
  given: O | undefined,
): DeviceAllocatorSettings<O, K> {
  const options = checkOptions<O>('options', given);
  const raw = options as Record<string, unknown>;
  if (raw.reclaimers !== undefined) {
    throw new InvalidArgumentError(
      'options.reclaimers',
      raw.reclaimers,
      `left out: the ${spec.deviceType} allocator always runs the runtime's reclaimers (register an IpcCollector or LmsReclaimer in a plugin instead)`,
    );
  }
  if (raw.memoryLimit !== undefined) {
    throw new InvalidArgumentError('options.memoryLimit', raw.memoryLimit, `left out: the ${spec.deviceType} plugin's budget is options.limit (it becomes the engine's memoryLimit)`);
  }
  checkOptions('options', options, deviceOptionKeys(spec));
  const own: Record<string, unknown> = {};
  const engine: Record<string, unknown> = {};
  const ownKeys = new Set<PropertyKey>(spec.deviceOptions);
  for (const key of Object.keys(raw)) {
    if (key === 'limit' || raw[key] === undefined) continue;
    (ownKeys.has(key) ? own : engine)[key] = raw[key];
  }
  const limit = options.limit ?? spec.defaultLimit;
  let budgetBytes: number | undefined;
  if (typeof limit === 'object' && limit !== null) {
    checkOptions('options.limit', limit, ['fraction']);
    if (spec.reportsCapacity === false) {
      throw new InvalidArgumentError('options.limit', limit, `a byte count such as '1GiB': the ${spec.deviceType} device reports no capacity to take a fraction of`);
    }
    if (typeof limit.fraction !== 'number' || !(limit.fraction > 0 && limit.fraction <= 1)) {
      throw new InvalidArgumentError('options.limit.fraction', limit.fraction, "a fraction in (0, 1] of the device's capacity");
    }
    engine.memoryLimit = { fraction: limit.fraction };
  } else if (limit !== undefined) {
    budgetBytes = typeof limit === 'number' || typeof limit === 'string' ? parseBytes(limit) : undefined;
    if (budgetBytes === undefined) throw new InvalidArgumentError('options.limit', limit, "a byte count such as 1073741824 or '1GiB', or { fraction }");
    engine.memoryLimit = budgetBytes;
  }
  const gc = engine.garbageCollectionThreshold;
  if (typeof gc === 'number' && gc > 0 && engine.memoryLimit === undefined) {
    throw new InvalidArgumentError('options.garbageCollectionThreshold', gc, 'used together with options.limit (it is a fraction of the budget)');
  }
  spec.checkDeviceOptions?.(own as Pick<O, K>);
  resolveCachingOptions(engine); // throws for a bad engine option now, naming it
  return { own: own as Pick<O, K>, engine, budgetBytes };
}

/**
 * The keys a device plugin takes: its own, `limit`, and the engine's but `memoryLimit`, `reclaimers` and those
 * the device leaves out.
 */
function deviceOptionKeys(spec: { readonly deviceOptions: readonly PropertyKey[]; readonly engineOptionsLeftOut?: readonly string[] }): string[] {
  const leftOut = new Set<string>(['memoryLimit', 'reclaimers', ...(spec.engineOptionsLeftOut ?? [])]);
  const engineKeys = CACHING_OPTION_KEYS.filter((key) => !leftOut.has(key));
  return [...spec.deviceOptions.map(String), 'limit', ...engineKeys];
}

/**
 * Makes a device allocator outside a runtime (no reclaimers): what `createCpuAllocator` and
 * `createWebGpuAllocator` do. Same checks and the same budget as in a runtime.
 * @throws InvalidArgumentError for bad options; BackendUnavailableError for a device index the spec does not serve
 */
export function createDeviceAllocator<O extends DeviceAllocatorOptions, K extends keyof O, A extends Allocator>(
  spec: DeviceAllocatorSpec<O, K, A>,
  options?: O,
  index = 0,
): A {
  const settings = resolveDeviceOptions(spec, options);
  const device: Device = Object.freeze({ type: spec.deviceType, index });
  checkDeviceIndex(spec, device);
  return spec.create(device, settings.engine, settings.own, settings.budgetBytes);
}

/**
 * Registers the allocator factory of one device type in a runtime's container: the one path every device plugin
 * takes (CPU and WebGPU in this repository; CUDA and third-party devices the same way). It
 * - checks the options once, here (`resolveDeviceOptions`): a bad option fails registration, naming it;
 * - maps the plugin's `limit` onto the caching engine's `memoryLimit`, the allocator's one budget, with the same
 *   meaning on every device; a backend's `capacityBytes` then says only what the hardware has;
 * - passes the engine options the plugin does not own (`garbageCollectionThreshold`, `maxSplitSize`, …) through;
 * - always gives the engine the runtime's reclaimers (every `IpcCollector`, then every `LmsReclaimer`), which no
 *   option can replace, so that the out-of-memory chain is the same on every device;
 * - checks the device index before `spec.create` runs, with one message for every device type.
 *
 * A third-party device writes its spec and calls this from its plugin's `register`:
 * ```ts
 * export function myDevice(options: MyOptions = {}): Plugin {
 *   resolveDeviceOptions(MY_SPEC, options); // fail at plugin construction, not at createRuntime
 *   return { name: 'my-device', register: (c) => registerDeviceAllocator(c, MY_SPEC, options) };
 * }
 * const MY_SPEC: DeviceAllocatorSpec<MyOptions, 'driverPath'> = {
 *   deviceType: 'my-device', deviceCount: 1, deviceOptions: ['driverPath'],
 *   create: (device, engine, own) => new CachingAllocator(new MyMemoryBackend(device, own.driverPath), engine),
 * };
 * ```
 * Device services (importing buffers, binding ranges, the pager, device-loss reports) sit beside the engine in
 * the allocator `create` returns (a `ForwardingAllocator` over it, say); devices never subclass the engine.
 * @throws InvalidArgumentError for bad options (now); the factory throws BackendUnavailableError for a device
 * index the plugin does not serve (on first use of that device)
 */
export function registerDeviceAllocator<O extends DeviceAllocatorOptions, K extends keyof O>(
  container: DependencyContainer,
  spec: DeviceAllocatorSpec<O, K>,
  options: O,
): void {
  const settings = resolveDeviceOptions(spec, options);
  const factory: AllocatorFactory = {
    deviceType: spec.deviceType,
    create(device, context): Allocator {
      checkDeviceIndex(spec, device);
      const allocator = spec.create(device, { ...settings.engine, reclaimers: context.reclaimers }, settings.own, settings.budgetBytes);
      const provide = <T>(token: Token<T>, service: T): void => context.provide(device, token, service);
      if (allocator instanceof CachingAllocator) {
        provide(BlockInspector, allocator);
        const pager = (allocator.backend as MemoryBackend<unknown>).pager;
        if (pager !== undefined) provide(Pager, pager);
      }
      spec.provideServices?.(allocator, provide);
      return allocator;
    },
  };
  container.register(AllocatorFactory, { useValue: factory });
}

/** @throws BackendUnavailableError unless `device.index` is one the spec serves */
function checkDeviceIndex(spec: { readonly deviceType: string; readonly deviceCount: number }, device: Device): void {
  const { deviceType: type, deviceCount: count } = spec;
  if (Number.isSafeInteger(device.index) && device.index >= 0 && device.index < count) return;
  const has = count === 0 ? `no ${type} device` : count === 1 ? `one ${type} device, ${type}:0` : `${count} ${type} devices, ${type}:0 to ${type}:${count - 1}`;
  const hint = count === 0 ? `Check that the ${type} plugin found its devices.` : `Use ${count === 1 ? 'that one' : 'one of those'}.`;
  throw new BackendUnavailableError(`${formatDevice(device)} does not exist: this runtime has ${has}. ${hint}`);
}
