import type { DependencyContainer } from 'tsyringe';
import type { Plugin } from '@stowage/core';
import type { MemoryReclaimer } from '@stowage/core/plugin-kit';
import { ReshapePolicy } from '@stowage/core';
import { AliasReshapePolicy, checkEnum, checkOptions, IpcCollector, TensorHooks } from '@stowage/core/plugin-kit';
import { createSharedCowPins, SharedCowPins } from './SharedCowPins.js';
import { CowReshapePolicy } from './CowReshapePolicy.js';
import { WarnReshapePolicy } from './WarnReshapePolicy.js';

export interface CowOptions {
  /**
   * What `reshape` returns: `'alias'` (a view when viewable, otherwise a copy: the default, as without this
   * plugin), `'cow'` (always a copy, lazy when viewable) or `'warn'` (as alias, warning where the program relies
   * on the aliasing: Note [Shadow storages] in WarnReshapePolicy.ts).
   */
  readonly reshape?: 'alias' | 'cow' | 'warn';
}

/**
 * Registers the COW reshape policy, and the runtime's set of storages shared with other threads (SharedCowPins),
 * collected in the host allocators' out-of-memory path (under IpcCollector). Lazy clones themselves need no registration: `lazyClone` works on any
 * storage whose allocator owns its data, and writes materialize through the DataPtr context
 * (core's WriteGuard), with or without this plugin.
 * @throws InvalidArgumentError for options that are not an object, an unknown key (naming the nearest known one)
 * or an unknown reshape mode
 */
export function registerCow(container: DependencyContainer, options: CowOptions = {}): void {
  const mode = checkCowOptions(options);
  const pins = createSharedCowPins();
  container.register(SharedCowPins, { useValue: pins });
  const collector: MemoryReclaimer = { reclaim: (device) => (device.type === 'cpu' ? pins.collect() : 0) };
  container.register(IpcCollector, { useValue: collector });
  if (mode === 'warn') {
    const policy = new WarnReshapePolicy();
    container.register(ReshapePolicy, { useValue: policy });
    container.register(TensorHooks, { useValue: policy });
    return;
  }
  container.register(ReshapePolicy, { useValue: mode === 'cow' ? new CowReshapePolicy() : new AliasReshapePolicy() });
}

/**
 * The COW plugin: `createRuntime({ plugins: [cow({ reshape: 'cow' })] })`.
 * @throws InvalidArgumentError for options that are not an object, an unknown key (naming the nearest known one)
 * or an unknown reshape mode, at once
 */
export function cow(options: CowOptions = {}): Plugin {
  checkCowOptions(options);
  return { name: 'cow', register: (container) => registerCow(container, options) };
}

const RESHAPE_MODES = ['alias', 'cow', 'warn'] as const;

/** The reshape mode the options choose. @throws InvalidArgumentError as `cow` documents */
function checkCowOptions(options: CowOptions | undefined): NonNullable<CowOptions['reshape']> {
  const checked = checkOptions<CowOptions>('options', options, ['reshape']);
  return checkEnum('options.reshape', checked.reshape, RESHAPE_MODES) ?? 'alias';
}
