import type { AllocateOptions, Allocator, AllocatorEventSource } from '../contracts/Allocator.js';
import type { AllocatorStats } from '../contracts/AllocatorStats.js';
import type { DataPtr } from '../storage/DataPtr.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import { parseBytes } from '../units/formatBytes.js';
import type { ForwardingAllocatorOptions } from '../allocators/ForwardingAllocator.js';
import { ForwardingAllocator } from '../allocators/ForwardingAllocator.js';
import { checkUpstream } from '../internal/checkUpstream.js';
import { checkAdaptorOptions } from './checkAdaptorOptions.js';
import { RelayEmitter } from '../internal/RelayEmitter.js';
import { checkByteCount } from '../validation/validate.js';

/** Options of a {@link LimitingAllocator}. */
export type LimitingAllocatorOptions = ForwardingAllocatorOptions;

/**
 * A hard budget over the bytes of the live allocations this adaptor handed out, after RMM's
 * `limiting_resource_adaptor`: `new LimitingAllocator(upstream, '8GiB')`. A request that would take the
 * requested bytes of its live pointers past `limitBytes` throws `OutOfMemoryError` (with `capacityBytes` and
 * `budgetBytes` the limit; its message names the budget) without reaching the upstream; the adaptor's own
 * `events` then report `outOfMemory` and its `memoryStats()` count it in `num_ooms`. A request within budget goes
 * to the upstream, which may still run out.
 *
 * The budget counts requested bytes (`ptr.byteLength`), not what the upstream rounds to or caches. Bytes come
 * back when a pointer is released by any path, `free(ptr)` or `ptr.release()` (Note [Adopting pointers]), even
 * after this adaptor was disposed.
 *
 * For allocators that are not the caching engine (a `makeAllocator` allocator, a third party's): the engine has its
 * own budget, `memoryLimit` (a device plugin's `limit`), which counts reserved bytes and runs the out-of-memory
 * chain (cache, IPC, LMS) before it gives up. Over the engine this adaptor would be a second budget that refuses
 * before that chain runs; give the engine its `memoryLimit` instead.
 *
 * Invariants: usedBytes == sum of byteLength over live pointers this adaptor returned; 0 <= usedBytes <= limitBytes.
 */
export class LimitingAllocator extends ForwardingAllocator {
  /** The budget, in bytes. */
  readonly limitBytes: number;
  readonly #emitter: RelayEmitter;
  /** Requested bytes of the live pointers this adaptor returned. */
  #usedBytes = 0;
  /** Requests this adaptor refused for the budget (the upstream's own refusals are in its `num_ooms`). */
  #refusals = 0;

  /**
   * @param limitBytes the budget: a byte count, or text such as `'512MiB'` (see `parseBytes`)
   * @throws InvalidArgumentError when `upstream` is not an allocator, `limitBytes` is not a byte count, or the
   * options are bad (see `checkAdaptorOptions`)
   */
  constructor(upstream: Allocator, limitBytes: number | string, options: LimitingAllocatorOptions = {}) {
    checkUpstream(upstream);
    const limit = typeof limitBytes === 'number' || typeof limitBytes === 'string' ? parseBytes(limitBytes) : undefined;
    if (limit === undefined) throw new InvalidArgumentError('limitBytes', limitBytes, "a byte count such as 1073741824 or '1GiB'");
    super(upstream, checkAdaptorOptions(options));
    this.limitBytes = limit;
    this.#emitter = new RelayEmitter(upstream.events);
  }

  /** Requested bytes of the live pointers this adaptor returned; at most `limitBytes`. */
  get usedBytes(): number {
    return this.#usedBytes;
  }

  /** The upstream's events, plus `outOfMemory` for requests this adaptor refused. */
  override get events(): AllocatorEventSource {
    return this.#emitter;
  }

  /**
   * Allocates through the upstream when `nbytes` fits in what is left of the budget.
   * @throws InvalidArgumentError when `nbytes` is not a byte count
   * @throws OutOfMemoryError when `usedBytes + nbytes > limitBytes` (the upstream is not called), or from the upstream
   * @throws DisposedError after `dispose()`
   */
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    checkByteCount('nbytes', nbytes);
    if (nbytes > this.limitBytes - this.#usedBytes) this.#refuse(nbytes);
    this.#usedBytes += nbytes; // reserved before the upstream call, so that its `allocated` listeners see a consistent budget
    try {
      return super.allocate(nbytes, options);
    } catch (error) {
      this.#usedBytes -= nbytes;
      throw error;
    }
  }

  /** The upstream's statistics, with this adaptor's refusals added to `num_ooms`. */
  override memoryStats(): AllocatorStats {
    const stats = super.memoryStats();
    return { ...stats, num_ooms: stats.num_ooms + this.#refusals };
  }

  override dispose(): void {
    if (this.isDisposed) return;
    this.#emitter.detach();
    super.dispose();
  }

  protected override onReleased(ptr: DataPtr): void {
    this.#usedBytes -= ptr.byteLength;
  }

  #refuse(nbytes: number): never {
    this.#refusals++;
    const stats = this.memoryStats();
    this.#emitter.safeEmit('outOfMemory', { requestedBytes: nbytes, stats });
    throw new OutOfMemoryError({ device: this.device, requestedBytes: nbytes, capacityBytes: this.limitBytes, budgetBytes: this.limitBytes, budgetUsedBytes: this.#usedBytes, stats });
  }
}
