import type { DependencyContainer, Lifecycle } from 'tsyringe';
import type { Allocator, AllocatorStats, Device, Plugin, Runtime } from '@stowage/core';
import { ForwardingAllocator, InvalidArgumentError, resolve } from '@stowage/core';
import { AllocatorDecorator, checkOptions, IpcCollector } from '@stowage/core/plugin-kit';

import type { IpcOptions } from './IpcService.js';
import { Ipc, IpcService } from './IpcService.js';
import { RefCounterFiles } from './refcount/RefCounterFiles.js';

/** tsyringe's `Lifecycle.ContainerScoped`, without loading tsyringe (it needs reflect-metadata, which only applications load). */
const CONTAINER_SCOPED = 3 as Lifecycle.ContainerScoped;

/** Device types whose allocators report `limbo_bytes` in `memoryStats()`. */
const LIMBO_DEVICES = ['cpu', 'cuda'] as const;

/**
 * Registers IPC in a runtime's container: the service under `Ipc`, the same object under `IpcCollector` (the
 * engine's out-of-memory chain collects the limbo) and its producer counters under `RefCounterFiles`, plus a
 * decorator per device type that adds `limbo_bytes` to the allocator's `memoryStats()`. The runtime's
 * container disposes the service (closing its counter files) when the runtime is disposed.
 * @throws InvalidArgumentError for an unknown option or a bad value
 */
export function registerIpc(container: DependencyContainer, options: IpcOptions = {}): void {
  checkIpcOptions(options);
  // A class provider, so that the container constructs the service and its dispose() closes the counter files
  // (tsyringe disposes what it constructed, not registered values). It takes no constructor parameters.
  const Service = class extends IpcService {
    constructor() {
      super(options);
    }
  };
  container.register(Ipc, { useClass: Service }, { lifecycle: CONTAINER_SCOPED });
  const service = resolve(container, Ipc);
  container.register(IpcCollector, { useValue: service });
  container.register(RefCounterFiles, { useValue: service.counters });
  for (const deviceType of LIMBO_DEVICES) {
    const decorator: AllocatorDecorator = { deviceType, wrap: (allocator, device) => new LimboStatsAllocator(allocator, device, service) };
    container.register(AllocatorDecorator, { useValue: decorator });
  }
}

/** The IPC plugin: `createRuntime({ plugins: [cpu({ shared: true }), ipc({ limboWarningBytes: 256 * MiB })] })`. */
export function ipc(options: IpcOptions = {}): Plugin {
  checkIpcOptions(options);
  return { name: 'ipc', register: (container) => registerIpc(container, options) };
}

/**
 * Collects `rt`'s limbo now: frees every allocation its producer released whose consumers are all done (and the
 * references of consumer processes that died). Returns the bytes freed. It also runs by itself when an allocator
 * runs out of memory and whenever a sent storage is released.
 * @throws InvalidArgumentError when `rt` has no `ipc()` plugin
 */
export function ipcCollect(rt: Runtime): number {
  return ipcOf(rt).collect();
}

/** The `Ipc` service of `rt`. @throws InvalidArgumentError when `rt` has no `ipc()` plugin */
export function ipcOf(rt: Runtime): Ipc {
  const container = (rt as Partial<Runtime> | null)?.container;
  if (container === undefined || !container.isRegistered(Ipc, true)) {
    throw new InvalidArgumentError('rt', rt, 'a Runtime created with the ipc() plugin: createRuntime({ plugins: [cpu({ shared: true }), ipc()] })');
  }
  return resolve(container, Ipc);
}

function checkIpcOptions(options: IpcOptions): void {
  const checked = checkOptions<IpcOptions>('options', options, ['limboWarningBytes', 'slotsPerFile', 'deadCheckIntervalMs']);
  const w = checked.limboWarningBytes;
  if (w !== undefined && (typeof w !== 'number' || Number.isNaN(w) || w < 0)) throw new InvalidArgumentError('options.limboWarningBytes', w, 'a byte count ≥ 0, or Infinity');
  const s = checked.slotsPerFile;
  if (s !== undefined && (!Number.isSafeInteger(s) || s < 1)) throw new InvalidArgumentError('options.slotsPerFile', s, 'an integer ≥ 1');
  const d = checked.deadCheckIntervalMs;
  if (d !== undefined && (typeof d !== 'number' || !Number.isFinite(d) || d < 0)) throw new InvalidArgumentError('options.deadCheckIntervalMs', d, 'milliseconds ≥ 0 (0: no timer)');
}

/** Adds the limbo's bytes on its device to the upstream's stats, as `limbo_bytes`. */
class LimboStatsAllocator extends ForwardingAllocator {
  readonly #device: Device;
  readonly #ipc: Ipc;

  constructor(upstream: Allocator, device: Device, ipc: Ipc) {
    super(upstream);
    this.#device = device;
    this.#ipc = ipc;
  }

  override memoryStats(): AllocatorStats {
    return { ...super.memoryStats(), limbo_bytes: this.#ipc.limboBytes(this.#device) };
  }
}

declare module '@stowage/core/plugin-kit' {
  interface PluginStats {
    /** Bytes this runtime sent that wait in its limbo for consumers to release them (`ipc()` in the runtime). */
    readonly limbo_bytes?: number;
  }
}
