import type { Allocator } from '../contracts/Allocator.js';
import type { AllocatorContext, AllocatorDecorator, AllocatorFactory } from '../contracts/AllocatorFactory.js';
import type { Device, DeviceLike } from '../contracts/Device.js';
import { formatDevice, isDeviceType, parseDevice } from '../contracts/Device.js';
import { BackendUnavailableError } from '../errors/BackendUnavailableError.js';
import { DeviceMismatchError } from '../errors/DeviceMismatchError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkReturned } from '../validation/validate.js';
import type { Token } from '../contracts/Token.js';
import type { DeviceServiceTable } from '../services/DeviceServiceTable.js';

/**
 * One runtime's allocators, one per device, made on first use by the registered factories.
 * Invariant: every allocator in `created` came from this registry's factories and is not disposed.
 */
export class AllocatorRegistry implements Disposable {
  readonly #factories = new Map<string, AllocatorFactory>();
  readonly #created = new Map<string, Allocator>();
  readonly #owned = new Set<Allocator>();
  readonly #context: AllocatorContext;
  readonly #decorators: readonly AllocatorDecorator[];
  readonly #services: DeviceServiceTable;

  /**
   * `services` is the table the context's `provide` fills (Note [Device services]).
   * @throws InvalidArgumentError for a factory that is not `{ deviceType, create }` or a decorator that is not
   * `{ deviceType, wrap }` (what a plugin registered), naming it
   */
  constructor(factories: readonly AllocatorFactory[], context: AllocatorContext, decorators: readonly AllocatorDecorator[], services: DeviceServiceTable) {
    if (!Array.isArray(factories)) throw new InvalidArgumentError('factories', factories, 'an array of AllocatorFactory');
    if (!Array.isArray(decorators)) throw new InvalidArgumentError('decorators', decorators, 'an array of AllocatorDecorator');
    for (const [i, factory] of factories.entries()) checkPluginObject(`the registered AllocatorFactory [${i}]`, factory, 'create');
    for (const [i, decorator] of decorators.entries()) checkPluginObject(`the registered AllocatorDecorator [${i}]`, decorator, 'wrap');
    this.#context = context;
    // Decorators apply in registration order, those marked outermost (LMS) after all the others.
    this.#decorators = [...decorators.filter((d) => d.outermost !== true), ...decorators.filter((d) => d.outermost === true)];
    this.#services = services;
    for (const factory of factories) this.#factories.set(factory.deviceType, factory);
  }

  /** Device types some factory serves, sorted. */
  get deviceTypes(): string[] {
    return [...this.#factories.keys()].sort();
  }

  /** Allocators made so far, by device text (`'cpu:0'`). */
  get created(): ReadonlyMap<string, Allocator> {
    return this.#created;
  }

  /**
   * The allocator for `device`, made on first use.
   * @throws BackendUnavailableError when no factory serves the device type, or the factory cannot make it
   */
  get(device: DeviceLike): Allocator {
    const parsed = parseDevice(device);
    const key = formatDevice(parsed);
    const existing = this.#created.get(key);
    if (existing) return existing;
    const factory = this.#factories.get(parsed.type);
    if (!factory) {
      throw new BackendUnavailableError(
        `No allocator is registered for ${key}: this runtime serves ${this.deviceTypes.join(', ')}. Add the plugin for '${parsed.type}' to createRuntime({ plugins }).`,
      );
    }
    let allocator: Allocator;
    try {
      allocator = checkReturned(`the AllocatorFactory for '${parsed.type}' (create(${key}))`, factory.create(parsed, this.#context), isAllocator, 'an Allocator');
    } catch (error) {
      this.#services.forget(parsed);
      throw error;
    }
    try {
      checkServes(allocator, parsed);
      const services = this.#services.of(parsed);
      const provide = <T>(token: Token<T>, service: T): void => this.#services.provide(parsed, token, service);
      for (const decorator of this.#decorators) {
        if (decorator.deviceType !== parsed.type) continue;
        const wrapped: unknown = decorator.wrap(allocator, parsed, services, provide);
        allocator = checkReturned(`the AllocatorDecorator for '${parsed.type}' (a wrapAllocators wrapper)`, wrapped, isAllocator, `an Allocator (the one it was given, wrapped)`);
      }
      checkServes(allocator, parsed);
    } catch (error) {
      // Not handed out: the allocator made so far (a decorator's wrapper owns what it wraps) goes back.
      this.#services.forget(parsed);
      try {
        allocator.dispose();
      } catch {
        // the first failure is the one to report
      }
      throw error;
    }
    this.#created.set(key, allocator);
    this.#owned.add(allocator);
    return allocator;
  }

  /**
   * The service registered under `token` for `device` (its allocator is made first, as `get` makes it);
   * undefined when the device offers none.
   * @throws as `get`
   */
  service<T>(token: Token<T>, device: DeviceLike): T | undefined {
    const parsed = parseDevice(device);
    this.get(parsed);
    return this.#services.get(parsed, token);
  }

  /** True when `allocator` was made by this registry (so storages it backs belong to this runtime). */
  owns(allocator: Allocator): boolean {
    return this.#owned.has(allocator);
  }

  /** Disposes every allocator made, even when one throws; then throws what they threw (AggregateError for several). */
  dispose(): void {
    const errors: unknown[] = [];
    for (const allocator of this.#created.values()) {
      try {
        allocator.dispose();
      } catch (error) {
        errors.push(error);
      }
    }
    this.#created.clear();
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateError(errors, `${errors.length} allocators failed to dispose; the others were disposed.`);
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

/** True for an object with the members every allocator has; enough to refuse a plugin's `null` or a wrong object. */
function isAllocator(value: unknown): value is Allocator {
  const a = value as Partial<Allocator> | null;
  return (
    typeof a === 'object' &&
    a !== null &&
    typeof a.allocate === 'function' &&
    typeof a.free === 'function' &&
    typeof a.memoryStats === 'function' &&
    typeof a.dispose === 'function' &&
    typeof a.device === 'object' &&
    a.device !== null
  );
}

/** Throws unless `value` is `{ deviceType: string, [method]: function }`. */
function checkPluginObject(argument: string, value: unknown, method: 'create' | 'wrap'): void {
  const v = value as Record<string, unknown> | null;
  if (typeof v !== 'object' || v === null || typeof v.deviceType !== 'string' || typeof v[method] !== 'function') {
    throw new InvalidArgumentError(argument, value, `an object with deviceType (a string) and ${method}()`);
  }
  if (!isDeviceType(v.deviceType)) {
    throw new InvalidArgumentError(`${argument}.deviceType`, v.deviceType, "a lowercase device type such as 'cpu' or 'my-npu' (letters, digits, '_' and '-', no ':' index): devices are named '<type>:<index>'");
  }
}

function checkServes(allocator: Allocator, device: Device): void {
  if (allocator.device.type !== device.type || allocator.device.index !== device.index) {
    allocator.dispose();
    throw new DeviceMismatchError(`The factory for '${device.type}' made an allocator for ${formatDevice(allocator.device)} when asked for ${formatDevice(device)}.`);
  }
}
