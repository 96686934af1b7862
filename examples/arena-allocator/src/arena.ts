import type { DependencyContainer } from 'tsyringe';
import type { Device, Plugin } from '@stowage/core';
import { AllocatorFactory } from '@stowage/core/plugin-kit';
import type { ArenaAllocatorOptions } from './ArenaAllocator.js';
import { createArenaAllocator } from './ArenaAllocator.js';

/** Registers the arena allocator for device type `'arena'`: one arena per device index. */
export function registerArenaAllocator(container: DependencyContainer, options: Omit<ArenaAllocatorOptions, 'device'> = {}): void {
  const factory: AllocatorFactory = {
    deviceType: 'arena',
    create: (device: Device) => createArenaAllocator({ ...options, device }),
  };
  container.register(AllocatorFactory, { useValue: factory });
}

/** The plugin: `createRuntime({ plugins: [arena({ capacity: '16MiB' })] })`, then `rt.storage(n, { device: 'arena' })`. */
export function arena(options: Omit<ArenaAllocatorOptions, 'device'> = {}): Plugin {
  return { name: 'arena', register: (container) => registerArenaAllocator(container, options) };
}
