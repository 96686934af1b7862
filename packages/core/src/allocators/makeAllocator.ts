import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import { DataPtr } from '../storage/DataPtr.js';
import type { DeviceLike } from '../contracts/Device.js';
import { formatDevice, parseDevice } from '../contracts/Device.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import { AllocatorBase } from '../internal/AllocatorBase.js';
import { isSmallRequest } from '../engine/SizeClass.js';
import { checkByteCount, checkOptions } from '../validation/validate.js';
import type { LmsStorage } from '../contracts/LmsStorage.js';
import type { BackendEvent, MemoryBackend } from '../contracts/MemoryBackend.js';
import type { MemoryBlock } from '../contracts/MemoryBlock.js';
import type { MemorySnapshot, SnapshotSegment } from '../contracts/MemorySnapshot.js';
import type { StorageImpl } from '../storage/StorageImpl.js';

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
  // A backend whose freed memory may still be read by unsubmitted work (deferredFree) gets its frees back
  // only once an event recorded at free time completes; until then the memory stays held.
  // Each block is its own segment, reported to the ManagedAllocator when the backend really takes or frees it.
  const pending: { block: MemoryBlock<H>; event: BackendEvent }[] = [];
  let segments: SegmentSink = { reserved: () => {}, released: () => {} };
  const release = (block: MemoryBlock<H>): void => {
    backend.free(block);
    segments.released(block);
  };
  const settle = (force: boolean): void => {
    let done = 0;
    while (done < pending.length && (force || backend.isEventComplete(pending[done]!.event))) {
      const { block, event } = pending[done]!;
      if (force) backend.synchronizeEvent(event);
      release(block);
      done++;
    }
    pending.splice(0, done);
  };
  return new ManagedAllocator<H>({
    device: backend.device,
    alignment: backend.alignment,
    capacityBytes: backend.capacityBytes,
    allocate: (nbytes, options) => {
      if (options.stream !== undefined && !backend.isStream(options.stream)) {
        throw new InvalidArgumentError('options.stream', options.stream, `a stream of ${formatDevice(backend.device)}`);
      }
      if (pending.length > 0) settle(false);
      const block = backend.malloc(nbytes, { ...(options.stream === undefined ? {} : { stream: options.stream }), kind: backend.segmentKind?.(options) ?? 0 });
      if (block) segments.reserved(block);
      return block;
    },
    free: (block) => {
      if (backend.deferredFree) pending.push({ block, event: backend.recordEvent(backend.defaultStream) });
      else release(block);
    },
    bindSegments: (sink) => {
      segments = sink;
    },
    copy: (dst, dstOffset, src, srcOffset, n) => backend.copy(dst, dstOffset, src, srcOffset, n),
    write: (dst, dstOffset, bytes) => backend.write(dst, dstOffset, bytes),
    read: (src, srcOffset, n) => backend.read(src, srcOffset, n),
    emptyCache: () => settle(true),
    settings: { kind: 'direct' },
    dispose: () => {
      settle(true);
      backend.dispose?.();
    },
  });
}

/**
 * Invariants: live.size == stats allocation.all.current;
 * sum over live of requestedBytes == requested_bytes.all.current;
 * sum over live of block.byteLength == allocated_bytes.all.current.
 */
class ManagedAllocator<H> extends AllocatorBase<H> {
  readonly #core: MinimalAllocator<H>;
  readonly #live = new Set<Allocation<H>>();
  readonly #countsSegments: boolean;

  constructor(core: MinimalAllocator<H>) {
    super(parseDevice(core.device), core.alignment, core);
    this.#core = core;
    if (core.asLmsStorage) this.asLmsStorage = (storage) => core.asLmsStorage!(storage);
    this.#countsSegments = core.bindSegments !== undefined;
    core.bindSegments?.({
      reserved: (segment) => this.#segmentChanged(segment, 1),
      released: (segment) => this.#segmentChanged(segment, -1),
    });
  }

  asLmsStorage?: (storage: StorageImpl) => LmsStorage | null;

  allocate(nbytes: number, options: AllocateOptions = {}): DataPtr<H> {
    this.checkOpen('allocate');
    checkByteCount('nbytes', nbytes);
    checkOptions('options', options);
    let block = this.#core.allocate(nbytes, options);
    if (block === null) {
      this.stats.num_alloc_retries++;
      this.emptyCache();
      block = this.#core.allocate(nbytes, options);
    }
    if (block === null) {
      this.stats.num_ooms++;
      const stats = this.memoryStats();
      this.emitter.safeEmit('outOfMemory', { requestedBytes: nbytes, stats });
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
      deleter: this.deleter,
    });
    allocation.ptr = ptr;
    this.#live.add(allocation);
    this.#count(block.byteLength, nbytes, 1);
    if (this.emitter.hears('allocated')) this.emitter.safeEmit('allocated', { ptr, requestedBytes: nbytes });
    return ptr;
  }

  snapshot(): MemorySnapshot {
    this.checkOpen('snapshot');
    const segments = this.#core.snapshotSegments?.() ?? [...this.#live].map((a) => this.#segmentOf(a));
    segments.sort((a, b) => a.address - b.address);
    return { segments, device_traces: [[]], allocator_settings: { ...(this.#core.settings ?? {}) }, external_annotations: [] };
  }

  emptyCache(): void {
    this.checkOpen('emptyCache');
    this.#core.emptyCache?.();
  }

  protected disposeResources(): void {
    for (const allocation of this.#live) {
      allocation.freed = true;
      this.#core.free(allocation.block);
    }
    this.#live.clear();
    this.#core.dispose?.();
  }

  protected releaseAllocation(context: unknown): void {
    const allocation = context as Allocation<H>;
    if (allocation.freed) return; // reclaimed by dispose(); the pointer outlived its allocator
    allocation.freed = true;
    this.#live.delete(allocation);
    // Counted out first: a core that returns a segment inside free() reports it to consistent statistics.
    this.#count(allocation.block.byteLength, allocation.requestedBytes, -1);
    this.#core.free(allocation.block);
    if (this.emitter.hears('freed')) this.emitter.safeEmit('freed', { ptr: allocation.ptr! });
  }

  /** Counts one allocation in (sign 1) or out (sign -1); each block is its own segment unless the core reports them. */
  #count(blockBytes: number, requestedBytes: number, sign: 1 | -1): void {
    const small = isSmallRequest(blockBytes);
    const s = this.stats;
    if (sign > 0) s.countAllocated(small, blockBytes, requestedBytes);
    else {
      s.countFreed(small, blockBytes);
      s.countInactive(small, blockBytes, requestedBytes);
    }
    if (!this.#countsSegments) {
      s.segment.add(small, sign);
      s.reserved_bytes.add(small, sign * blockBytes);
      if (sign > 0) s.num_device_alloc++;
      else s.num_device_free++;
    }
  }

  #segmentChanged(segment: { readonly address: number; readonly byteLength: number }, sign: 1 | -1): void {
    const small = isSmallRequest(segment.byteLength);
    this.stats.segment.add(small, sign);
    this.stats.reserved_bytes.add(small, sign * segment.byteLength);
    if (sign > 0) this.stats.num_device_alloc++;
    else this.stats.num_device_free++;
    const event = { address: segment.address, bytes: segment.byteLength };
    if (sign > 0) this.emitter.safeEmit('segmentReserved', event);
    else this.emitter.safeEmit('segmentReleased', event);
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
      segment_type: isSmallRequest(size) ? 'small' : 'large',
      segment_pool_id: [0, 0],
      is_expandable: false,
      frames: [],
      blocks: [{ address: a.block.address, size, requested_size: a.requestedBytes, state: 'active_allocated', frames: [] }],
    };
  }
}
