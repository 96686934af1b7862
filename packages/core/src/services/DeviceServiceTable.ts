import type { Device } from '../contracts/Device.js';
import { formatDevice } from '../contracts/Device.js';
import type { DeviceServices } from '../contracts/DeviceServices.js';
import type { Token } from '../contracts/Token.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

// Note [Device services]: what a device can do beyond allocating (page out, describe a block, bind a range,
// import a buffer, export an IPC handle) is registered per device, under a token, by the plugin that makes the
// device's allocator, in the runtime's table. Before, consumers found these by asking the outermost allocator or
// walking `upstream`, and every adaptor in between (statistics, tracking, logging, a third party's) could hide
// them. A runtime's table is its own: two runtimes never share services.

/**
 * The device services of one runtime, per device.
 *
 * Invariants: a device's services are registered before its allocator is handed out (its factory provides them,
 * decorators read them); a (device, token) pair holds at most one service.
 */
export class DeviceServiceTable {
  readonly #byDevice = new Map<string, Map<symbol, unknown>>();

  /**
   * Registers `service` under `token` for `device`.
   * @throws InvalidArgumentError when the token is not a symbol, the service is missing, or the device already has
   * a service under that token
   */
  provide<T>(device: Device, token: Token<T>, service: T): void {
    if (typeof token !== 'symbol') throw new InvalidArgumentError('token', token, 'a device-service token (a symbol)');
    if (service === undefined || service === null) throw new InvalidArgumentError('service', service, `the service to register under ${token.description ?? 'the token'}`);
    const key = formatDevice(device);
    let services = this.#byDevice.get(key);
    if (services === undefined) this.#byDevice.set(key, (services = new Map()));
    if (services.has(token)) {
      throw new InvalidArgumentError('token', token, `a token ${key} has no service under yet (${token.description ?? 'it'} is registered already)`);
    }
    services.set(token, service);
  }

  get<T>(device: Device, token: Token<T>): T | undefined {
    return this.#byDevice.get(formatDevice(device))?.get(token) as T | undefined;
  }

  /** The view of one device's services that decorators and consumers receive. */
  of(device: Device): DeviceServices {
    return { device, get: <T>(token: Token<T>) => this.get(device, token) };
  }

  /** Forgets every service of `device` (its allocator was not handed out, or was disposed). */
  forget(device: Device): void {
    this.#byDevice.delete(formatDevice(device));
  }
}
