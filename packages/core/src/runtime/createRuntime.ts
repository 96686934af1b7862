import type { DependencyContainer } from 'tsyringe';
import { Allocator } from '../contracts/Allocator.js';
import { AllocatorContext, AllocatorDecorator, AllocatorFactory } from '../contracts/AllocatorFactory.js';
import { AllocatorRegistry } from './AllocatorRegistry.js';
import { IpcCollector, LmsReclaimer, type MemoryReclaimer } from '../contracts/MemoryReclaimer.js';
import { registerCpuAllocator } from './cpu.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import type { Plugin } from '../contracts/Plugin.js';
import { AliasReshapePolicy } from '../storage/AliasReshapePolicy.js';
import { ReshapePolicy } from '../contracts/ReshapePolicy.js';
import { Runtime } from './Runtime.js';
import { DeviceServiceTable } from '../services/DeviceServiceTable.js';
import { StorageHooks } from '../contracts/StorageHooks.js';
import { TensorHooks } from '../contracts/TensorHooks.js';
import type { Token } from '../contracts/Token.js';
import { resolve, resolveAll } from '../contracts/Token.js';
import { StowageError } from '../errors/StowageError.js';
import { checkOptions } from '../validation/validate.js';

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
 * then each plugin's registrations. Async because device adapters are. Every plugin is checked before any
 * registers, so a bad list leaves nothing half-built; what plugins registered is checked where it is resolved
 * (the reshape policy here, factories and decorators by the AllocatorRegistry), with errors naming the plugin.
 * @throws InvalidArgumentError (as a rejected promise) for options that are not RuntimeOptions, a `parent` that is
 * not a tsyringe container, a plugin that is not `{ name, register }` with a non-empty string name, or a
 * registered reshape policy without `reshape`
 */
export async function createRuntime(options?: RuntimeOptions): Promise<Runtime> {
  const checked = checkOptions('options', options, ['plugins', 'parent']);
  const plugins = checked.plugins ?? [];
  if (!Array.isArray(plugins)) throw new InvalidArgumentError('options.plugins', plugins, 'an array of plugins');
  for (const [i, plugin] of (plugins as readonly unknown[]).entries()) checkPlugin(`plugins[${i}]`, plugin);
  const given = checked.parent as Partial<DependencyContainer> | undefined;
  if (given !== undefined && (typeof given !== 'object' || given === null || typeof given.createChildContainer !== 'function')) {
    throw new InvalidArgumentError('options.parent', given, 'a tsyringe DependencyContainer (or nothing, for the root container)');
  }
  // tsyringe is loaded here, not at import: it needs the reflect-metadata polyfill, which only applications
  // load, and users of core's allocators alone should not need it.
  const parent = checked.parent ?? (await import('tsyringe')).container;
  const container = parent.createChildContainer();
  registerCpuAllocator(container);
  container.register(ReshapePolicy, { useValue: new AliasReshapePolicy() });
  for (const [i, plugin] of plugins.entries()) await registerPlugin(`plugins[${i}]`, plugin, container);
  const services = new DeviceServiceTable();
  let reclaimers: readonly MemoryReclaimer[] | undefined;
  const context: AllocatorContext = {
    container,
    // Resolved once, at the first out-of-memory: every plugin has registered by then (a runtime's plugins are fixed
    // at its creation), and the engine's out-of-memory path then calls the reclaimers directly.
    reclaimers: () => (reclaimers ??= [...resolveAll(container, IpcCollector), ...resolveAll(container, LmsReclaimer)]),
    provide: (device, token, service) => services.provide(device, token, service),
  };
  container.register(AllocatorContext, { useValue: context });
  const allocators = new AllocatorRegistry(
    resolveRegistered(container, AllocatorFactory, 'AllocatorFactory'),
    context,
    resolveRegistered(container, AllocatorDecorator, 'AllocatorDecorator'),
    services,
  );
  container.register(AllocatorRegistry, { useValue: allocators });
  container.register(Allocator, { useFactory: () => allocators.get('cpu') });
  const runtime = new Runtime({
    container,
    allocators,
    reshapePolicy: resolveReshapePolicy(container),
    storageHooks: resolveRegistered(container, StorageHooks, 'StorageHooks'),
    tensorHooks: resolveRegistered(container, TensorHooks, 'TensorHooks'),
  });
  container.register(Runtime, { useValue: runtime });
  return runtime;
}

/** Throws unless `plugin` is `{ name, register }` with a non-empty string name. */
function checkPlugin(argument: string, plugin: unknown): asserts plugin is Plugin {
  const p = plugin as Partial<Plugin> | null;
  if (typeof p !== 'object' || p === null || Array.isArray(p) || typeof p.register !== 'function') {
    throw new InvalidArgumentError(argument, plugin, 'a plugin: an object with name and register(container)');
  }
  if (typeof p.name !== 'string' || p.name === '') throw new InvalidArgumentError(`${argument}.name`, p.name, 'a non-empty string naming the plugin');
}

/**
 * The registered reshape policy, checked: an object with a `reshape` function (what it returns is checked by
 * TensorImpl#reshape). A `null` registered as a policy is refused here instead of failing in tsyringe.
 */
function resolveReshapePolicy(container: DependencyContainer): ReshapePolicy {
  let policy: unknown;
  try {
    policy = resolve(container, ReshapePolicy);
  } catch (error) {
    throw new InvalidArgumentError('the registered ReshapePolicy', undefined, 'a ReshapePolicy registered with { useValue: policy } (resolving it failed)', { cause: error });
  }
  const p = policy as Partial<ReshapePolicy> | null;
  if (typeof p !== 'object' || p === null || typeof p.reshape !== 'function') {
    throw new InvalidArgumentError('the registered ReshapePolicy', policy, 'an object with name and reshape(tensor, sizes)');
  }
  return p as ReshapePolicy;
}

/**
 * Runs a plugin's registration. A StowageError (a device that cannot be used, bad options) passes through; any
 * other error (tsyringe's TypeError for `container.register(token, null)`, a bug in the plugin) becomes an
 * InvalidArgumentError naming the plugin, with the original as its cause.
 */
async function registerPlugin(argument: string, plugin: Plugin, container: DependencyContainer): Promise<void> {
  try {
    await plugin.register(container);
  } catch (error) {
    if (error instanceof StowageError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    throw new InvalidArgumentError(argument, plugin, `a plugin whose register(container) succeeds; the plugin ${JSON.stringify(plugin.name)} threw: ${message}`, { cause: error });
  }
}

/** Every registration of `token`; a registration tsyringe cannot resolve (`{ useValue: null }`) is an InvalidArgumentError. */
function resolveRegistered<T>(container: DependencyContainer, token: Token<T>, name: string): T[] {
  try {
    return resolveAll(container, token);
  } catch (error) {
    throw new InvalidArgumentError(`the registered ${name}`, undefined, `registered as a value, a factory or a class (resolving it failed: ${error instanceof Error ? error.message : String(error)})`, { cause: error });
  }
}
