import type { AllocateOptions, Allocator, AllocatorEventSource } from '../contracts/Allocator.js';
import type { AllocatorStats } from '../contracts/AllocatorStats.js';
import { DataPtr, type Deleter } from '../storage/DataPtr.js';
import { formatDevice } from '../contracts/Device.js';
import { DisposedError } from '../errors/DisposedError.js';
import { DoubleFreeError } from '../errors/DoubleFreeError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import type { Device } from '../contracts/Device.js';
import type { LmsStorage } from '../contracts/LmsStorage.js';
import type { MemorySnapshot } from '../contracts/MemorySnapshot.js';
import type { StorageImpl } from '../storage/StorageImpl.js';
import type { Adoption } from '../internal/allocatorDeleters.js';
import { makeAdoption, markAllocatorDeleter } from '../internal/allocatorDeleters.js';
import { throwHeld } from '../internal/AllocatorBase.js';
import { checkUpstream } from '../internal/checkUpstream.js';
import { checkBoolean, checkOptions } from '../validation/validate.js';

export interface ForwardingAllocatorOptions {
  /** Dispose the upstream when this adaptor is disposed (default true: the stack is owned top-down). */
  readonly ownsUpstream?: boolean;
}

/** What an adopting adaptor keeps as a pointer's context: the deleter and context it displaced. */

/**
 * The base of RMM-style adaptors: forwards every member to `upstream`, so that a subclass overrides only the
 * behaviour it adds. Adaptors stack without a container:
 * `new StatisticsAllocator(new LimitingAllocator(new CachingAllocator(backend), 8 * GiB))`. A device allocator uses
 * it the same way: it holds the caching engine as its upstream and keeps its device services beside it
 * (`WebGpuAllocator`: importing buffers, bindings, the pager), never subclassing the engine.
 *
 * Note [Adopting pointers]: a pointer is freed through `allocator.free(ptr)` or `ptr.release()` (storages, COW
 * and IPC use the latter), so an adaptor that keeps per-allocation state cannot rely on its own `free` being
 * called. A subclass that overrides `onReleased` adopts every pointer it returns: it swaps itself in as the
 * pointer's deleter (keeping the displaced deleter and context) so that `onReleased` runs on every release
 * path, exactly once, before the upstream frees the memory. `free` then accepts exactly the pointers this
 * adaptor adopted, and forwards any other to the upstream.
 */
export class ForwardingAllocator implements Allocator {
  readonly upstream: Allocator;
  readonly #ownsUpstream: boolean;
  readonly #deleter: Deleter = markAllocatorDeleter((context) => {
    const adopted = context as Adoption;
    try {
      this.onReleased?.(adopted.ptr);
    } finally {
      adopted.deleter?.(adopted.context);
    }
  });
  #disposed = false;

  /** Called once per pointer this adaptor returned, when it is released by any path; see Note [Adopting pointers]. */
  protected onReleased?(ptr: DataPtr): void;

  /** @throws InvalidArgumentError when `upstream` is not an Allocator or `options` is not ForwardingAllocatorOptions */
  constructor(upstream: Allocator, options: ForwardingAllocatorOptions = {}) {
    this.upstream = checkUpstream(upstream);
    const checked = checkOptions('options', options);
    this.#ownsUpstream = checkBoolean('options.ownsUpstream', checked.ownsUpstream) ?? true;
  }

  get device(): Device {
    return this.upstream.device;
  }

  get alignment(): number {
    return this.upstream.alignment;
  }

  get events(): AllocatorEventSource {
    return this.upstream.events;
  }

  allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    return this.adopt(this.upstream.allocate(nbytes, options));
  }

  owns(ptr: DataPtr): boolean {
    if (!(ptr instanceof DataPtr)) return false;
    return (this.onReleased !== undefined && ptr.deleter === this.#deleter) || (this.upstream.owns?.(ptr) ?? false);
  }

  /** Frees a pointer this adaptor adopted, or forwards to the upstream. */
  free(ptr: DataPtr): void {
    this.checkOpen('free');
    if (!(ptr instanceof DataPtr)) throw new InvalidArgumentError('ptr', ptr, 'a DataPtr');
    if (this.onReleased !== undefined && ptr.deleter === this.#deleter) {
      if (ptr.holder !== null) throwHeld(ptr);
      ptr.release();
    } else if (ptr.isReleased) throw new DoubleFreeError(`Cannot free the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)}: it was already released.`);
    else this.upstream.free(ptr);
  }

  /**
   * Makes this adaptor the pointer's deleter when the subclass has `onReleased`; returns `ptr`. Subclasses that
   * override `allocate` call it on what the upstream returned.
   */
  protected adopt(ptr: DataPtr): DataPtr {
    if (this.onReleased === undefined) return ptr;
    const adopted = makeAdoption(ptr);
    ptr.compareExchangeDeleter(adopted.deleter, this.#deleter, adopted);
    return ptr;
  }

  /**
   * Forwards to the upstream's `recordStream`; nothing to record when the upstream has none (one stream). A
   * pointer this adaptor adopted is shown to the upstream as it made it, with its own deleter and context, for
   * the call (Note [Adopting pointers]).
   */
  recordStream(ptr: DataPtr, stream: number): void {
    this.checkOpen('recordStream');
    this.upstream.recordStream?.(ptr, stream); // the engine finds its block through this adaptor's adoption
  }

  copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset?: number, srcOffset?: number): void {
    this.checkOpen('copyData');
    this.upstream.copyData(dst, src, nbytes, dstOffset, srcOffset);
  }

  writeBytes(dst: DataPtr, bytes: Uint8Array, dstOffset?: number): void {
    this.checkOpen('writeBytes');
    this.upstream.writeBytes(dst, bytes, dstOffset);
  }

  async readBytes(src: DataPtr, srcOffset?: number, byteLength?: number): Promise<Uint8Array> {
    this.checkOpen('readBytes');
    return this.upstream.readBytes(src, srcOffset, byteLength);
  }

  memoryStats(): AllocatorStats {
    this.checkOpen('memoryStats');
    return this.upstream.memoryStats();
  }

  resetPeakStats(): void {
    this.checkOpen('resetPeakStats');
    this.upstream.resetPeakStats();
  }

  snapshot(): MemorySnapshot {
    this.checkOpen('snapshot');
    return this.upstream.snapshot();
  }

  emptyCache(): void {
    this.checkOpen('emptyCache');
    this.upstream.emptyCache();
  }

  asLmsStorage(storage: StorageImpl): LmsStorage | null {
    return this.upstream.asLmsStorage?.(storage) ?? null;
  }

  /** The upstream's pager: an adaptor pages as what it wraps does. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#ownsUpstream) this.upstream.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  protected get isDisposed(): boolean {
    return this.#disposed;
  }

  /** @throws DisposedError after `dispose()`, whether or not this adaptor owns its upstream */
  protected checkOpen(method: string): void {
    if (this.#disposed) throw new DisposedError(`Cannot call ${method}() on the ${this.constructor.name} for ${formatDevice(this.device)}: it was disposed.`);
  }
}
