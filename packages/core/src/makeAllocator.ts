import type { AllocateOptions, Allocator, AllocatorEventSource } from './Allocator.js';
import type { AllocatorStats } from './AllocatorStats.js';
import { DataPtr } from './DataPtr.js';
import type { Device, DeviceLike } from './Device.js';
import { formatDevice, isSameDevice, parseDevice } from './Device.js';
import { DeviceMismatchError } from './errors/DeviceMismatchError.js';
import { DisposedError } from './errors/DisposedError.js';
import { DoubleFreeError } from './errors/DoubleFreeError.js';
import { ForeignPointerError } from './errors/ForeignPointerError.js';
import { InvalidArgumentError } from './errors/InvalidArgumentError.js';
import { OutOfMemoryError } from './errors/OutOfMemoryError.js';
import { UseAfterReleaseError } from './errors/UseAfterReleaseError.js';
import { SafeEmitter } from './internal/SafeEmitter.js';
import { poolOf, StatsBook } from './internal/StatsBook.js';
import { checkByteCount, checkBytes, checkRange } from './internal/validate.js';
import type { LmsStorage } from './LmsStorage.js';
import type { MemoryBackend } from './MemoryBackend.js';
import type { MemoryBlock } from './MemoryBlock.js';
import type { MemorySnapshot, SnapshotSegment } from './MemorySnapshot.js';
import type { StorageImpl } from './StorageImpl.js';

/**
 * The least an allocator must do; {@link makeAllocator} supplies the rest. Methods receive validated
 * arguments only.
 */
export interface MinimalAllocator<H = unknown> {
  readonly device: DeviceLike;
  /** Power of two; every block's address is a multiple of it. */
  readonly alignment: number;
  /** Device capacity or budget in bytes, for out-of-memory messages; undefined when unknown. */
  readonly capacityBytes?: number | undefined;
  /** A block of at least `nbytes` bytes, or null when there is no room. */
  allocate(nbytes: number, options: AllocateOptions): MemoryBlock<H> | null;
  /** Returns a block from `allocate`. Called exactly once per block. */
  free(block: MemoryBlock<H>): void;
  copy(dst: H, dstOffset: number, src: H, srcOffset: number, byteLength: number): void;
  write(dst: H, dstOffset: number, bytes: Uint8Array): void;
  read(src: H, srcOffset: number, byteLength: number): Promise<Uint8Array>;
  /**
   * For a core that holds memory beyond its live blocks (a cache, an arena): called once, at construction, with
   * the sink it must report every segment it reserves from and releases to the device. Without it, each live
   * block counts as its own segment.
   */
  bindSegments?(sink: SegmentSink): void;
  /** Returns cached memory to the device; called by `emptyCache()` and before the out-of-memory retry. */
  emptyCache?(): void;
  /** Segments for `snapshot()`; default: one segment per live block. */
  snapshotSegments?(): SnapshotSegment[];
  /** Shown as the snapshot's `allocator_settings`. */
  readonly settings?: Readonly<Record<string, unknown>>;
  asLmsStorage?(storage: StorageImpl): LmsStorage | null;
  /** Frees whatever the core holds beyond its blocks (called after every live block was freed). */
  dispose?(): void;
}

/** Where a {@link MinimalAllocator} reports the segments it holds from the device. */
export interface SegmentSink {
  reserved(segment: { readonly address: number; readonly byteLength: number }): void;
  released(segment: { readonly address: number; readonly byteLength: number }): void;
}

/** The allocator's record of one live allocation: a DataPtr's context. */
interface Allocation<H> {
  readonly block: MemoryBlock<H>;
  readonly requestedBytes: number;
  ptr: DataPtr<H> | undefined;
  /** True once the block went back to the core (freed, or reclaimed by dispose). */
  freed: boolean;
}

/**
 * Builds a full {@link Allocator} around a {@link MinimalAllocator}: argument validation, DataPtr ownership and
 * double-free detection, PyTorch-keyed statistics, events, the out-of-memory retry after `emptyCache`, typed
 * errors and snapshots.
 */
export function makeAllocator<H>(core: MinimalAllocator<H>): Allocator {
  return new ManagedAllocator(core);
}

/**
 * An allocator that asks the backend for every allocation and returns it on every free: no cache. The
 * baseline the caching engine is measured against, and a correct allocator for any backend.
 */
export function makeDirectAllocator<H>(backend: MemoryBackend<H>): Allocator {
  return new ManagedAllocator<H>({
    device: backend.device,
    alignment: backend.alignment,
    capacityBytes: backend.capacityBytes,
    allocate: (nbytes, options) => backend.malloc(nbytes, options),
    free: (block) => backend.free(block),
    copy: (dst, dstOffset, src, srcOffset, n) => backend.copy(dst, dstOffset, src, srcOffset, n),
    write: (dst, dstOffset, bytes) => backend.write(dst, dstOffset, bytes),
    read: (src, srcOffset, n) => backend.read(src, srcOffset, n),
    settings: { kind: 'direct' },
    dispose: () => backend.dispose?.(),
  });
}

/**
 * Invariants: live.size == stats allocation.all.current;
 * sum over live of requestedBytes == requested_bytes.all.current;
 * sum over live of block.byteLength == allocated_bytes.all.current.
 */
class ManagedAllocator<H> implements Allocator {
  readonly device: Device;
  readonly alignment: number;
  readonly #core: MinimalAllocator<H>;
  readonly #emitter = new SafeEmitter();
  readonly #live = new Set<Allocation<H>>();
  readonly #stats = new StatsBook();
  readonly #deleter = (context: unknown): void => this.#release(context as Allocation<H>);
  readonly #countsSegments: boolean;
  #disposed = false;

  constructor(core: MinimalAllocator<H>) {
    const alignment = core.alignment;
    if (!Number.isSafeInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0) {
      throw new InvalidArgumentError('alignment', alignment, 'a power of two');
    }
    this.#core = core;
    this.device = parseDevice(core.device);
    this.alignment = alignment;
    if (core.asLmsStorage) this.asLmsStorage = (storage) => core.asLmsStorage!(storage);
    this.#countsSegments = core.bindSegments !== undefined;
    core.bindSegments?.({
      reserved: (segment) => this.#segmentChanged(segment, 1),
      released: (segment) => this.#segmentChanged(segment, -1),
    });
  }

  asLmsStorage?: (storage: StorageImpl) => LmsStorage | null;

  get events(): AllocatorEventSource {
    return this.#emitter;
  }

  allocate(nbytes: number, options: AllocateOptions = {}): DataPtr<H> {
    this.#checkOpen('allocate');
    checkByteCount('nbytes', nbytes);
    let block = this.#core.allocate(nbytes, options);
    if (block === null) {
      this.#stats.counters.num_alloc_retries++;
      this.emptyCache();
      block = this.#core.allocate(nbytes, options);
    }
    if (block === null) {
      this.#stats.counters.num_ooms++;
      const stats = this.memoryStats();
      this.#emitter.safeEmit('outOfMemory', { requestedBytes: nbytes, stats });
      throw new OutOfMemoryError({ device: this.device, requestedBytes: nbytes, capacityBytes: this.#core.capacityBytes, stats });
    }
    const allocation: Allocation<H> = { block, requestedBytes: nbytes, ptr: undefined, freed: false };
    const ptr = new DataPtr<H>({
      device: this.device,
      byteLength: nbytes,
      handle: block.handle,
      byteOffset: block.byteOffset,
      address: block.address,
      context: allocation,
      deleter: this.#deleter,
    });
    allocation.ptr = ptr;
    this.#live.add(allocation);
    const pool = poolOf(block.byteLength);
    this.#stats.counters.num_device_alloc++;
    this.#stats.update('allocation', pool, 1);
    this.#stats.update('active', pool, 1);
    this.#stats.update('allocated_bytes', pool, block.byteLength);
    this.#stats.update('active_bytes', pool, block.byteLength);
    this.#stats.update('requested_bytes', pool, nbytes);
    if (!this.#countsSegments) {
      this.#stats.update('segment', pool, 1);
      this.#stats.update('reserved_bytes', pool, block.byteLength);
    }
    this.#emitter.safeEmit('allocated', { ptr, requestedBytes: nbytes });
    return ptr;
  }

  free(ptr: DataPtr): void {
    this.#checkOpen('free');
    this.#checkPtr('ptr', ptr, 'free');
    ptr.release();
  }

  copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset = 0, srcOffset = 0): void {
    this.#checkOpen('copyData');
    this.#checkPtr('dst', dst);
    this.#checkPtr('src', src);
    checkByteCount('nbytes', nbytes);
    checkByteCount('dstOffset', dstOffset);
    checkByteCount('srcOffset', srcOffset);
    checkRange('nbytes', dstOffset, nbytes, dst.byteLength, 'destination');
    checkRange('nbytes', srcOffset, nbytes, src.byteLength, 'source');
    if (nbytes === 0) return;
    this.#core.copy(dst.handle as H, dst.byteOffset + dstOffset, src.handle as H, src.byteOffset + srcOffset, nbytes);
  }

  writeBytes(dst: DataPtr, bytes: Uint8Array, dstOffset = 0): void {
    this.#checkOpen('writeBytes');
    this.#checkPtr('dst', dst);
    const data = checkBytes('bytes', bytes);
    checkByteCount('dstOffset', dstOffset);
    checkRange('bytes.byteLength', dstOffset, data.byteLength, dst.byteLength, 'destination');
    if (data.byteLength === 0) return;
    this.#core.write(dst.handle as H, dst.byteOffset + dstOffset, data);
  }

  async readBytes(src: DataPtr, srcOffset = 0, byteLength?: number): Promise<Uint8Array> {
    this.#checkOpen('readBytes');
    this.#checkPtr('src', src);
    checkByteCount('srcOffset', srcOffset);
    const length = byteLength === undefined ? Math.max(0, src.byteLength - srcOffset) : checkByteCount('byteLength', byteLength);
    checkRange('byteLength', srcOffset, length, src.byteLength, 'source');
    if (length === 0) return new Uint8Array(0);
    return this.#core.read(src.handle as H, src.byteOffset + srcOffset, length);
  }

  memoryStats(): AllocatorStats {
    return this.#stats.toRecord();
  }

  resetPeakStats(): void {
    this.#stats.resetPeak();
  }

  snapshot(): MemorySnapshot {
    this.#checkOpen('snapshot');
    const segments = this.#core.snapshotSegments?.() ?? [...this.#live].map((a) => this.#segmentOf(a));
    segments.sort((a, b) => a.address - b.address);
    return { segments, device_traces: [[]], allocator_settings: { ...(this.#core.settings ?? {}) } };
  }

  emptyCache(): void {
    this.#checkOpen('emptyCache');
    this.#core.emptyCache?.();
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const allocation of this.#live) {
      allocation.freed = true;
      this.#core.free(allocation.block);
    }
    this.#live.clear();
    this.#core.dispose?.();
    this.#emitter.removeAllListeners();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #release(allocation: Allocation<H>): void {
    if (allocation.freed) return; // reclaimed by dispose(); the pointer outlived its allocator
    allocation.freed = true;
    this.#live.delete(allocation);
    this.#core.free(allocation.block);
    const bytes = allocation.block.byteLength;
    const pool = poolOf(bytes);
    this.#stats.counters.num_device_free++;
    this.#stats.update('allocation', pool, -1);
    this.#stats.update('active', pool, -1);
    this.#stats.update('allocated_bytes', pool, -bytes);
    this.#stats.update('active_bytes', pool, -bytes);
    this.#stats.update('requested_bytes', pool, -allocation.requestedBytes);
    if (!this.#countsSegments) {
      this.#stats.update('segment', pool, -1);
      this.#stats.update('reserved_bytes', pool, -bytes);
    }
    this.#emitter.safeEmit('freed', { ptr: allocation.ptr! });
  }

  #segmentChanged(segment: { readonly address: number; readonly byteLength: number }, sign: 1 | -1): void {
    const pool = poolOf(segment.byteLength);
    this.#stats.update('segment', pool, sign);
    this.#stats.update('reserved_bytes', pool, sign * segment.byteLength);
    const event = { address: segment.address, bytes: segment.byteLength };
    if (sign > 0) this.#emitter.safeEmit('segmentReserved', event);
    else this.#emitter.safeEmit('segmentReleased', event);
  }

  #segmentOf(a: Allocation<H>): SnapshotSegment {
    const size = a.block.byteLength;
    return {
      device: this.device.index,
      address: a.block.address,
      total_size: size,
      allocated_size: size,
      active_size: size,
      requested_size: a.requestedBytes,
      stream: 0,
      segment_type: poolOf(size) === 'small_pool' ? 'small' : 'large',
      segment_pool_id: [0, 0],
      is_expandable: false,
      frames: [],
      blocks: [{ address: a.block.address, size, requested_size: a.requestedBytes, state: 'active_allocated', frames: [] }],
    };
  }

  #checkOpen(method: string): void {
    if (this.#disposed) throw new DisposedError(`Cannot call ${method}() on the ${formatDevice(this.device)} allocator: it was disposed.`);
  }

  /** Checks that `ptr` is a live DataPtr on this allocator's device; with `owned`, that this allocator owns it. */
  #checkPtr(argument: string, ptr: DataPtr, owned?: 'free'): void {
    if (!(ptr instanceof DataPtr)) throw new InvalidArgumentError(argument, ptr, 'a DataPtr');
    if (ptr.isReleased) {
      const what = `the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)}`;
      if (owned) throw new DoubleFreeError(`Cannot free ${what}: it was already released.`);
      throw new UseAfterReleaseError(`${argument} is ${what}, which was already released.`);
    }
    if (!isSameDevice(ptr.device, this.device)) {
      throw new DeviceMismatchError(`${argument} lives on ${formatDevice(ptr.device)}, but this allocator serves ${formatDevice(this.device)}.`);
    }
    if (owned && ptr.deleter !== this.#deleter) {
      throw new ForeignPointerError(
        `Cannot free the allocation at 0x${ptr.address.toString(16)}: this ${formatDevice(this.device)} allocator did not allocate it, or COW/IPC now owns it (release it through its storage instead).`,
      );
    }
  }
}
