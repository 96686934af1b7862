import type { Allocator } from '../contracts/Allocator.js';
import { AllocatorDecorator } from '../contracts/AllocatorFactory.js';
import type { Device } from '../contracts/Device.js';
import type { Plugin } from '../contracts/Plugin.js';

/**
 * A plugin that wraps the allocator of every device of one type in adaptors, e.g.
 * `wrapAllocators('cpu', (a) => new StatisticsAllocator(new LimitingAllocator(a, '8GiB')))`. Plugins listed
 * later wrap outside earlier ones.
 */
export function wrapAllocators(deviceType: string, wrap: (allocator: Allocator, device: Device) => Allocator): Plugin {
  const decorator: AllocatorDecorator = { deviceType, wrap };
  return { name: `wrap:${deviceType}`, register: (container) => void container.register(AllocatorDecorator, { useValue: decorator }) };
}
