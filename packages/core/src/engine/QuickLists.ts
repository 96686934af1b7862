/**
 * Quick lists: deferred coalescing of small freed blocks (Note [Deferred coalescing]).
 *
 * - A freed block of at most 1 MiB goes to a LIFO list of its exact (kind, stream, rounded size), unmerged.
 * - The next request of that size takes it in O(1) (CachingAllocator's #takeCached reads `lists` and `bytes`
 *   directly: it is the hot path).
 * - Before the engine reserves, releases or gives up, and when nothing is left allocated, `flush` merges every
 *   listed block into its pool.
 * - The lists are bounded per size (QUICK_LIST_MAX) and in total bytes (a share of reserved bytes).
 */
import type { StatsBook } from '../internal/StatsBook.js';
import type { Block } from './Block.js';
import type { ResolvedCachingOptions } from './CachingAllocatorOptions.js';
import { SMALL_REQUEST_MAX_BYTES } from './SizeClass.js';

/** Quick lists hold at most this many blocks per size, and at most 1/QUICK_SHARE_DIVISOR of reserved bytes. */
const QUICK_LIST_MAX = 32;
const QUICK_SHARE_DIVISOR = 32;

/** A numeric key for (kind < 16, stream < 1024, size < 512 GiB), or -1 when out of that range. */
export function quickKey(kind: number, stream: number, size: number): number {
  if (kind >= 16 || stream >= 1024 || size >= 2 ** 39) return -1;
  return (size * 1024 + stream) * 16 + kind;
}

/**
 * Note [Deferred coalescing]: with `deferCoalescing` (the best preset), a freed block of at most 1 MiB (a
 * small-pool block, or a small one of unified pools) first goes to a short LIFO list of blocks of its exact
 * (kind, stream, rounded size), unmerged, and the next request of that size takes it in O(1) without touching the
 * ordered pool: the common case of tensor programs that allocate the same shapes every step. Large blocks always
 * merge at once: deferring them changes placement enough to raise peak reserved bytes on the PyTorch traces,
 * while deferring small ones leaves every trace's peak unchanged (packages/core/README.md). Before the engine
 * reserves memory, releases memory or answers that nothing fits, it flushes every quick list into the pools
 * (merging as usual), so deferral never makes the engine reserve a segment that merging would have avoided, and
 * when a free leaves nothing allocated (a static-shape loop then starts each step from the same whole free
 * blocks; CachingAllocator's #freeBlock). The lists are bounded (per size and in total bytes).
 *
 * Invariants: `bytes` == sum of the sizes of the listed blocks; a block is listed iff `block.quick`; a listed
 * block is free, mapped, in no pool, and counted in inactive_split when its (non-expandable) segment is split.
 */
export class QuickLists<H> {
  /** Listed blocks by quickKey(kind, stream, size), most recently freed last. */
  readonly lists = new Map<number, Block<H>[]>();
  /** Bytes of the listed blocks. */
  bytes = 0;

  constructor(
    private readonly options: ResolvedCachingOptions,
    private readonly stats: StatsBook,
    /** Merges a block into its pool (CachingAllocator's #coalesceIntoPool). */
    private readonly coalesce: (block: Block<H>) => void,
  ) {}

  /** Lists a freed block when deferral is on and the lists have room; false when it must merge at once. */
  defer(block: Block<H>): boolean {
    if (!this.options.deferCoalescing || block.size > SMALL_REQUEST_MAX_BYTES) return false;
    const key = quickKey(block.segment.kind, block.stream, block.size);
    if (key < 0 || this.bytes + block.size > this.stats.reservedBytes / QUICK_SHARE_DIVISOR) return false;
    let list = this.lists.get(key);
    if (!list) this.lists.set(key, (list = []));
    if (list.length >= QUICK_LIST_MAX) return false;
    list.push(block);
    block.quick = true;
    this.bytes += block.size;
    if (block.isSplit && !block.segment.expandable) {
      this.stats.inactive_split.add(block.small, 1);
      this.stats.inactive_split_bytes.add(block.small, block.size);
    }
    return true;
  }

  /** Moves every listed block into its pool (merging); true when there were any. */
  flush(): boolean {
    if (this.bytes === 0) return false;
    const stats = this.stats;
    for (const list of this.lists.values()) {
      for (const block of list) {
        block.quick = false;
        if (block.isSplit && !block.segment.expandable) {
          stats.inactive_split.add(block.small, -1);
          stats.inactive_split_bytes.add(block.small, -block.size);
        }
        this.coalesce(block);
      }
    }
    this.lists.clear();
    this.bytes = 0;
    return true;
  }

  /** Listed blocks in all. */
  get count(): number {
    let n = 0;
    for (const list of this.lists.values()) n += list.length;
    return n;
  }

  /** Forgets every listed block (the engine is disposed: the blocks went back with their segments). */
  clear(): void {
    this.lists.clear();
    this.bytes = 0;
  }
}
