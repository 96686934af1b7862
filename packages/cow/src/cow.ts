import type { DependencyContainer } from 'tsyringe';
import type { Plugin } from '@stowage/core';
import { AliasReshapePolicy, InvalidArgumentError, ReshapePolicy, TensorHooks } from '@stowage/core';
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
 * Registers the COW reshape policy. Lazy clones themselves need no registration: `lazyClone` works on any
 * storage whose allocator owns its data, and writes materialize through the DataPtr context
 * (core's WriteGuard), with or without this plugin.
 * @throws InvalidArgumentError for an unknown reshape mode
 */
export function registerCow(container: DependencyContainer, options: CowOptions = {}): void {
  const mode = options.reshape ?? 'alias';
  if (mode === 'warn') {
    const policy = new WarnReshapePolicy();
    container.register(ReshapePolicy, { useValue: policy });
    container.register(TensorHooks, { useValue: policy });
    return;
  }
  if (mode !== 'alias' && mode !== 'cow') throw new InvalidArgumentError('options.reshape', mode, "'alias', 'cow' or 'warn'");
  container.register(ReshapePolicy, { useValue: mode === 'cow' ? new CowReshapePolicy() : new AliasReshapePolicy() });
}

/** The COW plugin: `createRuntime({ plugins: [cow({ reshape: 'cow' })] })`. */
export function cow(options: CowOptions = {}): Plugin {
  return { name: 'cow', register: (container) => registerCow(container, options) };
}
