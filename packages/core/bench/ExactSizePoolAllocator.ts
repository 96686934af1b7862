import type { AllocateOptions, Allocator, MemoryBackend, MinimalAllocator } from '@stowage/core';
import type { MemoryBlock, SegmentSink, SnapshotSegment } from '@stowage/core/plugin-kit';
import { makeAllocator } from '@stowage/core';

/** Every request is rounded up to a multiple of this many bytes (PyTorch's minimum block size). */
export const EXACT_SIZE_POOL_ROUNDING_BYTES = 512;

/**
 * The simplest fast reuse, a baseline for the caching engine's benchmarks: requests are rounded up to a multiple
 * of 512 bytes; a freed block goes onto a free list for its exact size and serves only a later request of that
 * same rounded size (and segment kind, where the backend has kinds). No splitting, no coalescing, no streams
 * (every segment comes from the backend's default stream). Each block is its own backend segment, reported through `bindSegments` so reserved bytes count the
 * cache.
 *
 * Invariants: reservedBytes == allocated block bytes + cachedBytes; every cached block is in exactly one free
 * list, the one for its kind and byteLength; live and cached blocks are disjoint.
 */
export class ExactSizePool<H> implements MinimalAllocator<H> {
  readonly device: MemoryBackend<H>['device'];
  readonly alignment: number;
  readonly capacityBytes: number | undefined;
  readonly settings: Readonly<Record<string, unknown>> = { kind: 'exact-size-pool', roundingBytes: EXACT_SIZE_POOL_ROUNDING_BYTES };
  readonly #backend: MemoryBackend<H>;
  /** Cached blocks by segment kind (`backend.segmentKind`, 0 when absent), then by byteLength. */
  readonly #free = new Map<number, Map<number, MemoryBlock<H>[]>>();
  /** Live blocks: the bytes their allocation requested (for snapshots) and their segment kind. */
  readonly #live = new Map<MemoryBlock<H>, { readonly requestedBytes: number; readonly kind: number }>();
  #sink: SegmentSink = { reserved: () => {}, released: () => {} };
  #cachedBytes = 0;

  constructor(backend: MemoryBackend<H>) {
    this.#backend = backend;
    this.device = backend.device;
    this.alignment = backend.alignment;
    this.capacityBytes = backend.capacityBytes;
  }

  /** Bytes held in free lists. */
  get cachedBytes(): number {
    return this.#cachedBytes;
  }

  allocate(nbytes: number, options: AllocateOptions): MemoryBlock<H> | null {
    const size = Math.ceil(Math.max(nbytes, 1) / EXACT_SIZE_POOL_ROUNDING_BYTES) * EXACT_SIZE_POOL_ROUNDING_BYTES;
    const kind = this.#backend.segmentKind?.(options) ?? 0;
    let block = this.#free.get(kind)?.get(size)?.pop();
    if (block !== undefined) {
      this.#cachedBytes -= size;
    } else {
      block = this.#backend.malloc(size, kind === 0 ? undefined : { kind }) ?? undefined;
      if (block === undefined) return null;
      this.#sink.reserved(block);
    }
    this.#live.set(block, { requestedBytes: nbytes, kind });
    return block;
  }

  free(block: MemoryBlock<H>): void {
    const kind = this.#live.get(block)?.kind ?? 0;
    this.#live.delete(block);
    let bySize = this.#free.get(kind);
    if (!bySize) this.#free.set(kind, (bySize = new Map()));
    const list = bySize.get(block.byteLength);
    if (list) list.push(block);
    else bySize.set(block.byteLength, [block]);
    this.#cachedBytes += block.byteLength;
  }

  copy(dst: H, dstOffset: number, src: H, srcOffset: number, byteLength: number): void {
    this.#backend.copy(dst, dstOffset, src, srcOffset, byteLength);
  }

  write(dst: H, dstOffset: number, bytes: Uint8Array): void {
    this.#backend.write(dst, dstOffset, bytes);
  }

  read(src: H, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    return this.#backend.read(src, srcOffset, byteLength);
  }

  bindSegments(sink: SegmentSink): void {
    this.#sink = sink;
  }

  /** Returns every cached block to the backend. */
  emptyCache(): void {
    for (const bySize of this.#free.values()) {
      for (const list of bySize.values()) {
        for (const block of list) {
          this.#backend.free(block);
          this.#sink.released(block);
        }
      }
    }
    this.#free.clear();
    this.#cachedBytes = 0;
  }

  /** One segment per block: live blocks active, cached blocks inactive. */
  snapshotSegments(): SnapshotSegment[] {
    const segments: SnapshotSegment[] = [];
    for (const [block, live] of this.#live) segments.push(this.#segment(block, live.requestedBytes));
    for (const bySize of this.#free.values()) {
      for (const list of bySize.values()) for (const block of list) segments.push(this.#segment(block, undefined));
    }
    return segments;
  }

  /** Called by the allocator's dispose after every live block came back: releases the cache, then the backend. */
  dispose(): void {
    this.emptyCache();
    this.#backend.dispose?.();
  }

  #segment(block: MemoryBlock<H>, requested: number | undefined): SnapshotSegment {
    const size = block.byteLength;
    const live = requested !== undefined;
    return {
      device: this.device.index,
      address: block.address,
      total_size: size,
      allocated_size: live ? size : 0,
      active_size: live ? size : 0,
      requested_size: requested ?? 0,
      stream: this.#backend.defaultStream,
      segment_type: size <= 1 << 20 ? 'small' : 'large',
      segment_pool_id: [0, 0],
      is_expandable: false,
      frames: [],
      blocks: [{ address: block.address, size, requested_size: requested ?? 0, state: live ? 'active_allocated' : 'inactive', frames: [] }],
    };
  }
}

/** An {@link ExactSizePool} over `backend`, made a full Allocator by `makeAllocator`; `pool` exposes the cache. */
export function createExactSizePoolAllocator<H>(backend: MemoryBackend<H>): Allocator & { readonly pool: ExactSizePool<H> } {
  const pool = new ExactSizePool(backend);
  return Object.assign(makeAllocator(pool), { pool });
}
