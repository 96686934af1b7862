import type { Device } from './Device.js';
import type { Token } from './Token.js';

/**
 * The services one device offers beyond allocating (Note [Device services]): a pager, a block inspector, buffer
 * binding and import, IPC export… Keyed by token. A device plugin registers them as it makes the device's
 * allocator (`AllocatorContext#provide`); consumers resolve them by token and device (`Runtime#service`,
 * decorators' third argument), never through the allocator, so an adaptor wrapping the allocator cannot hide one.
 */
export interface DeviceServices {
  readonly device: Device;
  /** The service registered under `token` for this device; undefined when the device offers none. */
  get<T>(token: Token<T>): T | undefined;
}
