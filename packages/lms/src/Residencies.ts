import type { Allocator, Device, DeviceLike, DeviceServices, Token } from '@stowage/core';
import type { LmsController } from './LmsController.js';
import type { MemoryReclaimer, ReclaimTarget } from '@stowage/core/plugin-kit';
import { BlockInspector, formatDevice, InvalidArgumentError, Pager, parseDevice } from '@stowage/core';
import { LmsAllocator } from './LmsAllocator.js';
import { Residency } from './Residency.js';
import { checkPolicy, type LmsPolicy } from './LmsPolicy.js';
import type { SpeculationSettings } from './speculation/SpeculationOptions.js';
import { SPECULATION_OFF } from './speculation/SpeculationOptions.js';

/**
 * LMS in one runtime (its {@link LmsController}): the residency of every device that pages. Wraps each such
 * device's allocator in an {@link LmsAllocator} (an AllocatorDecorator), and is the runtime's LmsReclaimer: the
 * caching engine's out-of-memory chain calls `reclaim` on it.
 */
export class Residencies implements LmsController, MemoryReclaimer {
  readonly #devices = new Map<string, { readonly residency: Residency; readonly allocator: Allocator }>();
  readonly #policyOf: () => LmsPolicy;
  readonly #speculation: SpeculationSettings;

  /**
   * `policyOf` resolves the policy on first use (a plugin registered after `lms()` can still replace it);
   * `speculation` says what to do with the learned sequence (off by default).
   */
  constructor(policyOf: () => LmsPolicy, speculation: SpeculationSettings = SPECULATION_OFF) {
    let policy: LmsPolicy | undefined;
    this.#policyOf = () => (policy ??= checkPolicy('the LmsPolicy registered in the runtime', policyOf()));
    this.#speculation = speculation;
  }

  /** What LMS does with the sequence it learns (Note [Speculation]). */
  get speculation(): SpeculationSettings {
    return this.#speculation;
  }

  /** The policy this runtime's LMS uses. */
  get policy(): LmsPolicy {
    return this.#policyOf();
  }

  /**
   * The allocator under LMS when its device can page (it offers the Pager and BlockInspector services), and the
   * device's {@link Residency} provided as a device service; otherwise the allocator itself, unchanged.
   */
  wrap(allocator: Allocator, device: Device, services: DeviceServices, provide: <T>(token: Token<T>, service: T) => void): Allocator {
    const pager = services.get(Pager);
    const inspector = services.get(BlockInspector);
    if (pager === undefined || inspector === undefined) return allocator;
    this.#policyOf(); // a policy registered in the runtime is checked now, when the first paging allocator is made
    const key = formatDevice(device);
    const held = this.#devices.get(key);
    if (held !== undefined && !(held.allocator as Partial<{ isDisposed: boolean }>).isDisposed) {
      // One residency per device: a second would take the device's reclaims and statistics from the first.
      throw new InvalidArgumentError('allocator', `a second allocator for ${key}`, `one allocator per device under LMS: ${key} has one already (dispose it first)`);
    }
    const wrapped = new LmsAllocator(allocator, pager, inspector, this.#policyOf, this.#speculation);
    provide(Residency, wrapped.lms);
    this.#devices.set(key, { residency: wrapped.lms, allocator: wrapped });
    return wrapped;
  }

  /** LMS on `device`, or undefined when no allocator of it pages. */
  device(device: DeviceLike): Residency | undefined {
    return this.#devices.get(formatDevice(parseDevice(device)))?.residency;
  }

  /** @throws InvalidArgumentError for something that is not a device (the engines always pass theirs) */
  reclaim(device: Device, requestedBytes: number, target?: ReclaimTarget): number {
    return this.#devices.get(formatDevice(parseDevice(device)))?.residency.reclaim(requestedBytes, target) ?? 0;
  }

  /**
   * Marks the end of one iteration of the program's loop (a training step) on every device: the sequence of pins
   * since the last mark is learned, and the next iteration is predicted from it (Note [Speculation]). Call it at
   * the same point of every iteration; a program that never calls it gets no predictions.
   */
  endIteration(): void {
    for (const { residency } of this.#devices.values()) residency.endIteration();
  }

  /** Reclaims every inactive storage on `device` (every device when absent); returns the bytes freed. */
  reclaimInactive(device?: DeviceLike): number {
    if (device !== undefined) return this.device(device)?.reclaimAll() ?? 0;
    let freed = 0;
    for (const { residency } of this.#devices.values()) freed += residency.reclaimAll();
    return freed;
  }
}
