import type { Allocator } from '../contracts/Allocator.js';
import { AllocatorDecorator } from '../contracts/AllocatorFactory.js';
import type { Device } from '../contracts/Device.js';
import type { Plugin } from '../contracts/Plugin.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkFunction } from '../validation/validate.js';

/**
 * A plugin that wraps the allocator of every device of one type in adaptors, e.g.
 * `wrapAllocators('cpu', (a) => new StatisticsAllocator(new LimitingAllocator(a, '8GiB')))`. Plugins listed
 * later wrap outside earlier ones. What `wrap` returns is checked when the runtime makes the allocator: anything
 * but an Allocator for the same device is an InvalidArgumentError naming the wrapper.
 * @throws InvalidArgumentError when `deviceType` is not a device type or `wrap` is not a function
 */
export function wrapAllocators(deviceType: string, wrap: (allocator: Allocator, device: Device) => Allocator): Plugin {
  if (typeof deviceType !== 'string' || !/^[a-z][a-z0-9_-]*$/.test(deviceType)) throw new InvalidArgumentError('deviceType', deviceType, "a device type such as 'cpu'");
  checkFunction('wrap', wrap, 'a function (allocator, device) => Allocator that wraps the allocator in adaptors');
  const decorator: AllocatorDecorator = { deviceType, wrap };
  return { name: `wrap:${deviceType}`, register: (container) => void container.register(AllocatorDecorator, { useValue: decorator }) };
}
