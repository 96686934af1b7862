import type { DependencyContainer } from 'tsyringe';
import type { Plugin } from '@stowage/core';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec } from '@stowage/core/plugin-kit';
import { CachingAllocator, resolve } from '@stowage/core';
import { registerDeviceAllocator, resolveDeviceOptions } from '@stowage/core/plugin-kit';

import { Ipc } from './IpcService.js';
import { SharedMemoryBackend, SharedMemoryBackendToken } from './shm/SharedMemoryBackend.js';

/**
 * Registers the host allocator over POSIX shared memory in a runtime's container (in place of `cpu()`'s: list it
 * after `cpu()`, or alone), and its backend under `SharedMemoryBackendToken`. Its storages cross to other
 * processes through a `StorageQueue` over a child process's channel, zero copy.
 * @throws InvalidArgumentError for a bad option
 */
export function registerSharedMemoryCpu(container: DependencyContainer, options: DeviceAllocatorOptions = {}): void {
  // The last holder unlinks: a segment a consumer still holds keeps its name when the producer frees it.
  const backend = new SharedMemoryBackend({ holdsSegment: (handle) => container.isRegistered(Ipc, true) && resolve(container, Ipc).holdsSegment(handle) });
  const spec: DeviceAllocatorSpec<DeviceAllocatorOptions, never> = {
    ...SPEC,
    create: (_device, engine) => new CachingAllocator(backend, engine),
  };
  registerDeviceAllocator(container, spec, options);
  container.register(SharedMemoryBackendToken, { useValue: backend });
}

/** The shared-memory host allocator plugin: `createRuntime({ plugins: [sharedMemoryCpu({ limit: '1GiB' }), ipc()] })`. */
export function sharedMemoryCpu(options: DeviceAllocatorOptions = {}): Plugin {
  resolveDeviceOptions(SPEC, options);
  return { name: 'shared-memory-cpu', register: (container) => registerSharedMemoryCpu(container, options) };
}

const SPEC: DeviceAllocatorSpec<DeviceAllocatorOptions, never> = {
  deviceType: 'cpu',
  deviceCount: 1,
  deviceOptions: [],
  reportsCapacity: false,
  create: () => {
    throw new Error('unreachable: registerSharedMemoryCpu gives each runtime its own backend');
  },
};
