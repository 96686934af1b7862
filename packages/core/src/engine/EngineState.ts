/**
 * The state the caching engine's mechanisms share, and the block rules more than one of them applies.
 *
 * - CachingAllocator owns one EngineState and hands it to the mechanisms that walk pools or segments
 *   (FixedSegments, ExpandableSegments, SegmentRelease, OutOfMemoryChain, EngineSnapshot, EngineInvariants): the
 *   pools, the segments, the statistics, the backend and the options, nothing of another mechanism. QuickLists and
 *   StreamEvents get only the options, statistics or backend they read.
 * - Each segment kind has a small and a large pool (Note [Segment kinds] in CachingAllocator.ts).
 * - A mechanism that reserves or releases memory queues a segment event here; CachingAllocator emits the queue
 *   once its state is whole (Note [Segment events] in CachingAllocator.ts).
 */
import type { StreamId } from '../contracts/MemoryBackend.js';
import type { MemoryBackend } from '../contracts/MemoryBackend.js';
import type { StatsBook } from '../internal/StatsBook.js';
import type { Block, Segment } from './Block.js';
import { BlockPool } from './BlockPool.js';
import type { ResolvedCachingOptions } from './CachingAllocatorOptions.js';
import type { History } from './History.js';
import { LARGE_SEGMENT_BYTES, MIN_BLOCK_BYTES, SMALL_REQUEST_MAX_BYTES } from './SizeClass.js';

/** One request on its way through the allocation path. */
export interface Request<H> {
  readonly stream: StreamId;
  readonly kind: number;
  /** Rounded size. */
  readonly size: number;
  readonly pool: BlockPool<H>;
}

/** A `segmentReserved` (reserved) or `segmentReleased` event waiting to be emitted. */
export interface SegmentEvent {
  readonly reserved: boolean;
  readonly address: number;
  readonly bytes: number;
}

/** True for a block that sits in its pool: mapped, free, not quick-listed, no pending events or stream uses. */
export function isPooledFree<H>(b: Block<H>): boolean {
  return !b.allocated && b.mapped && !b.quick && b.eventCount === 0 && (b.streamUses === null || b.streamUses.size === 0);
}

/**
 * Whether a free block of `blockBytes` may serve a request of `size` under the max split size: an oversize block
 * never serves a request that could split a smaller one, nor serves an oversize request much smaller than itself.
 */
export function maySplitFor(blockBytes: number, size: number, maxSplit: number): boolean {
  return size < maxSplit ? blockBytes < maxSplit : blockBytes < size + LARGE_SEGMENT_BYTES;
}

/**
 * Whether `block` is split for a request of `size` (the rest stays free in its pool): a small-pool, expandable or
 * unified-pool block when at least one minimum block is left; a large one, as PyTorch, when the request is under
 * the max split size and more than a small request's bytes are left.
 */
export function shouldSplit<H>(block: Block<H>, size: number, options: Pick<ResolvedCachingOptions, 'unifiedPools' | 'maxSplitSize'>): boolean {
  const remaining = block.size - size;
  if (block.small || block.segment.expandable || options.unifiedPools) return remaining >= MIN_BLOCK_BYTES;
  return size < options.maxSplitSize && remaining > SMALL_REQUEST_MAX_BYTES;
}

/** Merges a free pooled neighbour into `dst`, out of `pool`; returns the bytes merged (0 when it is not free). */
export function tryMerge<H>(dst: Block<H>, src: Block<H> | null, pool: BlockPool<H>): number {
  if (!src || !isPooledFree(src)) return 0;
  pool.remove(src);
  if (dst.prev === src) {
    dst.address = src.address;
    dst.prev = src.prev;
    if (dst.prev) dst.prev.next = dst;
    else dst.segment.head = dst;
  } else {
    dst.next = src.next;
    if (dst.next) dst.next.prev = dst;
    else dst.segment.tail = dst;
  }
  dst.size += src.size;
  return src.size;
}

/**
 * The engine's shared state.
 *
 * Invariants: every segment the backend backs is in `segments`; `pools.get(kind)` holds the free blocks of
 * segments of that kind, small pool first; `stats.reservedBytes` == sum of `segments`' mapped bytes;
 * `peakLiveBytes` >= every value allocated bytes ever had.
 */
export class EngineState<H> {
  /** Small and large pools per segment kind (Note [Segment kinds] in CachingAllocator.ts). */
  readonly pools = new Map<number, readonly [small: BlockPool<H>, large: BlockPool<H>]>();
  /** Every segment the engine holds: fixed, expandable and retired. */
  readonly segments = new Set<Segment<H>>();
  /** Segment events not yet emitted, in order (Note [Segment events] in CachingAllocator.ts). */
  readonly segmentEvents: SegmentEvent[] = [];
  /** The trace recordHistory() asked for; null when off. */
  history: History | null = null;
  /**
   * The most bytes ever allocated at once; unlike the peak statistic, never reset (Note [Expandable segments] in
   * ExpandableSegments.ts).
   */
  peakLiveBytes = 0;

  constructor(
    readonly backend: MemoryBackend<H>,
    readonly options: ResolvedCachingOptions,
    readonly stats: StatsBook,
    /** Bytes the memory limit allows; Infinity without a limit. */
    readonly allowedBytes: number,
  ) {}

  /** Bytes reserved from the backend right now. */
  get reservedBytes(): number {
    return this.stats.reservedBytes;
  }

  /** Bytes the engine may reserve: the memory limit, else the backend's capacity (undefined when unknown). */
  get capacityBytes(): number | undefined {
    return Number.isFinite(this.allowedBytes) ? this.allowedBytes : this.backend.capacityBytes;
  }

  /** The small and large pools of segment kind `kind`, created on first use. */
  poolsOf(kind: number): readonly [BlockPool<H>, BlockPool<H>] {
    let pools = this.pools.get(kind);
    if (!pools) {
      this.pools.set(kind, (pools = [new BlockPool<H>(true), new BlockPool<H>(false)]));
    }
    return pools;
  }

  poolOf(block: Block<H>): BlockPool<H> {
    return this.poolsOf(block.segment.kind)[block.small ? 0 : 1];
  }

  /** Every pool, large pools first. */
  allPools(): BlockPool<H>[] {
    const pools = [...this.pools.values()];
    return [...pools.map((p) => p[1]), ...pools.map((p) => p[0])];
  }

  /** Queues a segment event for CachingAllocator to emit once its state is whole. */
  queueSegmentEvent(reserved: boolean, address: number, bytes: number): void {
    this.segmentEvents.push({ reserved, address, bytes });
  }
}
