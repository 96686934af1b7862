import type { DependencyContainer } from 'tsyringe';
import type { Plugin } from '@stowage/core';
import { AliasReshapePolicy, InvalidArgumentError, ReshapePolicy } from '@stowage/core';
import { CowReshapePolicy } from './CowReshapePolicy.js';

export interface CowOptions {
  /**
   * What `reshape` returns: `'alias'` (a view when viewable, otherwise a copy: the default, as without this
   * plugin) or `'cow'` (always a copy, lazy when viewable). The `'warn'` mode is not implemented yet.
   */
  readonly reshape?: 'alias' | 'cow';
}

/**
 * Registers the COW reshape policy. Lazy clones themselves need no registration: `lazyClone` works on any
 * storage whose allocator owns its data, and writes materialize through the DataPtr context
 * (core's WriteGuard), with or without this plugin.
 * @throws InvalidArgumentError for an unknown reshape mode
 */
export function registerCow(container: DependencyContainer, options: CowOptions = {}): void {
  const mode = options.reshape ?? 'alias';
  if (mode !== 'alias' && mode !== 'cow') throw new InvalidArgumentError('options.reshape', mode, "'alias' or 'cow' ('warn' is not implemented yet)");
  container.register(ReshapePolicy, { useValue: mode === 'cow' ? new CowReshapePolicy() : new AliasReshapePolicy() });
}

/** The COW plugin: `createRuntime({ plugins: [cow({ reshape: 'cow' })] })`. */
export function cow(options: CowOptions = {}): Plugin {
  return { name: 'cow', register: (container) => registerCow(container, options) };
}
