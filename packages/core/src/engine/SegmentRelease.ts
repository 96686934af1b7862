/**
 * Releasing cached memory: giving free segments and free pages back to the backend.
 *
 * - Only a whole free segment goes back (an unsplit cached block); a split segment stays until its blocks merge.
 * - Out of memory, first the request's stream gives back cached oversize segments, from the one that fits the
 *   request (or the largest) down, until enough went back (PyTorch's release_available_cached_blocks).
 * - Then every unsplit cached segment goes back, and the free pages of every expandable segment are unmapped
 *   (release_cached_blocks, also emptyCache); pending frees complete and quick lists merge first.
 * - `trim` gives back segments largest first until reserved bytes are at most its target, then free pages.
 * - Garbage collection (with a threshold) gives back segments older than the average age, repeatedly, until
 *   reserved bytes are under the threshold's share of the limit.
 * - A retired segment goes back once nothing in it is allocated or pending (Note [Retired segments] in
 *   CachingAllocator.ts).
 */
import type { Block, Segment } from './Block.js';
import type { EngineState, Request } from './EngineState.js';
import { isPooledFree } from './EngineState.js';
import type { ExpandableSegments } from './ExpandableSegments.js';
import type { FixedSegments } from './FixedSegments.js';
import type { QuickLists } from './QuickLists.js';
import type { StreamEvents } from './StreamEvents.js';

/** Gives cached segments and pages back. Stateless beyond the shared EngineState and the mechanisms it drives. */
export class SegmentRelease<H> {
  constructor(
    private readonly state: EngineState<H>,
    private readonly events: StreamEvents<H>,
    private readonly quick: QuickLists<H>,
    private readonly fixed: FixedSegments<H>,
    private readonly expandable: ExpandableSegments<H>,
  ) {}

  /** Frees cached oversize blocks of the request's stream until one large enough went back. */
  releaseAvailableCachedBlocks(r: Request<H>): boolean {
    const maxSplit = this.state.options.maxSplitSize;
    if (maxSplit === Number.MAX_SAFE_INTEGER) return false;
    const pool = r.pool;
    const wanted = Math.max(r.size, maxSplit);
    const fit = pool.lowerBound(r.stream, wanted);
    if (fit !== undefined) {
      if (fit.isSplit || fit.segment.expandable) return false;
      this.releaseSegment(fit);
      return true;
    }
    // No single block is large enough: free oversize blocks from the largest down until enough went back.
    let released = 0;
    let block = pool.largest(r.stream);
    while (block !== undefined && released < wanted && block.size >= maxSplit) {
      const next = pool.lower(block);
      if (!block.isSplit && !block.segment.expandable) {
        released += block.size;
        this.releaseSegment(block);
      }
      block = next;
    }
    return released >= wanted;
  }

  /**
   * Completes the frees waiting on events (waiting for them) and merges the quick lists into the pools: every free
   * block is then whole and in its pool.
   */
  settleFrees(): void {
    this.events.synchronize();
    this.quick.flush();
  }

  /** Frees every unsplit cached segment and the free pages of expandable ones; true (as PyTorch). */
  releaseCachedBlocks(): boolean {
    this.settleFrees();
    for (const pool of this.state.allPools()) {
      for (const block of pool.blocks()) if (!block.isSplit && !block.segment.expandable) this.releaseSegment(block);
    }
    this.expandable.unmapAllFreePages();
    return true;
  }

  /**
   * Releases cached segments, largest first, until reserved bytes are at most `targetBytes` or nothing cached is
   * left, then the free pages of expandable segments.
   */
  trim(targetBytes: number): void {
    const state = this.state;
    this.settleFrees();
    const releasable = state.allPools().flatMap((pool) => [...pool.blocks()]).filter((b) => !b.isSplit && !b.segment.expandable);
    releasable.sort((a, b) => b.size - a.size);
    for (const block of releasable) {
      if (state.reservedBytes <= targetBytes) break;
      this.releaseSegment(block);
    }
    if (state.reservedBytes > targetBytes) this.expandable.unmapAllFreePages();
  }

  /**
   * Frees cached segments older than the average age, repeatedly, until reserved memory is under the
   * threshold's share of the limit (PyTorch's garbage_collection_threshold).
   */
  garbageCollect(): void {
    const state = this.state;
    const threshold = state.options.garbageCollectionThreshold * state.allowedBytes;
    if (state.reservedBytes <= threshold) return;
    this.quick.flush();
    const target = state.reservedBytes - threshold;
    const large = [...state.pools.values()].map((p) => p[1]);
    const age = (b: Block<H>): number => state.poolOf(b).searchCount - b.gcCountBase;
    let candidates = large.flatMap((pool) => [...pool.blocks()]).filter((b) => !b.isSplit && !b.segment.expandable);
    let totalAge = candidates.reduce((sum, b) => sum + age(b), 0);
    let reclaimed = 0;
    while (reclaimed < target && candidates.length > 0) {
      const threshold = totalAge / candidates.length;
      const old = candidates.filter((b) => age(b) >= threshold);
      if (old.length === 0) break;
      for (const block of old) {
        reclaimed += block.size;
        totalAge -= age(block);
        this.releaseSegment(block);
      }
      candidates = candidates.filter((b) => !old.includes(b));
    }
  }

  /** Returns an unsplit cached block's whole segment to the backend. */
  releaseSegment(block: Block<H>): void {
    const segment = block.segment;
    this.state.poolOf(block).remove(block);
    block.released = true;
    this.state.segments.delete(segment);
    this.returnToBackend(segment);
  }

  /**
   * Takes the segments with backend handle `handle` out of service (Note [Retired segments] in
   * CachingAllocator.ts): their free blocks leave the pools, and each goes back once idle. Returns whether a
   * segment had that handle.
   */
  retire(handle: H): boolean {
    const state = this.state;
    let found = false;
    for (const segment of [...state.segments]) {
      if (segment.memory.handle !== handle || segment.retired) continue;
      if (!found) this.quick.flush(); // every free block merged and in its pool
      found = true;
      segment.retired = true;
      this.expandable.unlist(segment);
      for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) {
        if (!isPooledFree(b)) continue;
        state.poolOf(b).remove(b);
        if (b.isSplit && !segment.expandable) {
          state.stats.inactive_split.add(b.small, -1);
          state.stats.inactive_split_bytes.add(b.small, -b.size);
        }
      }
      this.releaseIfIdle(segment);
    }
    return found;
  }

  /** Returns a retired segment to the backend when nothing in it is allocated or pending. */
  releaseIfIdle(segment: Segment<H>): void {
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) if (b.allocated || b.eventCount > 0) return;
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) b.released = true;
    this.state.segments.delete(segment);
    this.returnToBackend(segment);
  }

  /** Gives a segment already out of `segments` and the pools back to the backend, and counts it out. */
  returnToBackend(segment: Segment<H>): void {
    if (segment.expandable) this.expandable.returnSegment(segment);
    else this.fixed.free(segment);
  }
}
