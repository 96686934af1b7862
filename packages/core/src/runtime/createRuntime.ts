import type { DependencyContainer } from 'tsyringe';
import { Allocator } from '../contracts/Allocator.js';
import { AllocatorContext, AllocatorDecorator, AllocatorFactory } from '../contracts/AllocatorFactory.js';
import { AllocatorRegistry } from './AllocatorRegistry.js';
import { IpcCollector, LmsReclaimer } from '../contracts/MemoryReclaimer.js';
import { registerCpuAllocator } from './cpu.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import type { Plugin } from '../contracts/Plugin.js';
import { AliasReshapePolicy } from '../storage/AliasReshapePolicy.js';
import { ReshapePolicy } from '../contracts/ReshapePolicy.js';
import { Runtime } from './Runtime.js';
import { StorageHooks } from '../contracts/StorageHooks.js';
import { TensorHooks } from '../contracts/TensorHooks.js';
import { resolve, resolveAll } from '../contracts/Token.js';

export interface RuntimeOptions {
  /** Plugins in order; a later registration of a token wins over an earlier one (and over core's defaults). */
  readonly plugins?: readonly Plugin[];
  /**
   * The container the runtime's own container is a child of. Default: tsyringe's root container, used only as
   * an empty parent (Stowage never registers into it).
   */
  readonly parent?: DependencyContainer;
}

/**
 * Composes a runtime: a child container with core's defaults (the CPU allocator, the alias reshape policy),
 * then each plugin's registrations. Async because device adapters are.
 * @throws InvalidArgumentError for a plugin that is not `{ name, register }`
 */
export async function createRuntime(options: RuntimeOptions = {}): Promise<Runtime> {
  const plugins = options.plugins ?? [];
  if (!Array.isArray(plugins)) throw new InvalidArgumentError('plugins', plugins, 'an array of plugins');
  // tsyringe is loaded here, not at import: it needs the reflect-metadata polyfill, which only applications
  // load, and users of core's allocators alone should not need it.
  const parent = options.parent ?? (await import('tsyringe')).container;
  const container = parent.createChildContainer();
  registerCpuAllocator(container);
  container.register(ReshapePolicy, { useValue: new AliasReshapePolicy() });
  for (const [i, plugin] of plugins.entries()) {
    if (typeof plugin !== 'object' || plugin === null || typeof plugin.register !== 'function') {
      throw new InvalidArgumentError(`plugins[${i}]`, plugin, 'a plugin: an object with name and register(container)');
    }
    await plugin.register(container);
  }
  const context: AllocatorContext = {
    container,
    reclaimers: () => [...resolveAll(container, IpcCollector), ...resolveAll(container, LmsReclaimer)],
  };
  container.register(AllocatorContext, { useValue: context });
  const allocators = new AllocatorRegistry(resolveAll(container, AllocatorFactory), context, resolveAll(container, AllocatorDecorator));
  container.register(AllocatorRegistry, { useValue: allocators });
  container.register(Allocator, { useFactory: () => allocators.get('cpu') });
  const runtime = new Runtime({
    container,
    allocators,
    reshapePolicy: resolve(container, ReshapePolicy),
    storageHooks: resolveAll(container, StorageHooks),
    tensorHooks: resolveAll(container, TensorHooks),
  });
  container.register(Runtime, { useValue: runtime });
  return runtime;
}
