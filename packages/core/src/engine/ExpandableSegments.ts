/**
 * Expandable segments: one large address range per (kind, stream, pool), with device pages mapped on demand
 * (Note [Expandable segments]).
 *
 * - Blocks tile the segment's used prefix `[address, address + extentBytes)`; a block is mapped (allocated,
 *   pending, quick-listed or pooled) or an unmapped gap, listed by size in `segment.gaps`.
 * - To serve a request: remap the smallest gap that, with the free neighbours the request may take, is large
 *   enough (mapping only the pages it needs), else map pages at the end, extending a free last block.
 * - Under a fragmentation limit, growing to a new peak first unmaps the free pages of every expandable segment.
 * - Under memory pressure (emptyCache, trim, the out-of-memory chain) the whole pages (or runs, Note [Page runs])
 *   inside every free block are unmapped, leaving the partial ones at either end mapped and a gap in the middle;
 *   adjacent gaps merge, a trailing gap leaves the prefix, and an empty segment returns its address range.
 * - Each map or unmap call counts once: reserved bytes, num_device_alloc/free, a trace entry and a segment event.
 */
import { Block, Segment } from './Block.js';
import type { BlockPool } from './BlockPool.js';
import type { EngineState, Request } from './EngineState.js';
import { isPooledFree, maySplitFor, tryMerge } from './EngineState.js';

/** Gaps that need their free neighbours to fit a request, examined at most per request (Note [Expandable segments]). */
const GAP_SCAN_LIMIT = 64;
/** Mapping within this fraction above the most ever mapped is not a new peak (Note [Expandable segments]). */
const RESERVED_PEAK_SLACK = 0.01;
/** An expandable segment reserves this many times the device capacity in address space (gaps fragment it). */
const EXPANDABLE_RESERVE_FACTOR = 8;
/** PyTorch's page sizes with expandable segments: kSmallBuffer in the small pool, kLargeBuffer in the large one. */
const PYTORCH_PAGE_BYTES = { small: 2 * 2 ** 20, large: 20 * 2 ** 20 } as const;

/**
 * Note [Best fit next to unmapped space]: PyTorch's best fit in expandable segments measures a free block followed by
 * unmapped space (a gap, or the segment's unmapped end) as the block plus that space, and walks from the smallest
 * fitting block to larger ones while the next one measures less. A free block at the end of a segment therefore
 * serves a request only when no larger free block elsewhere fits: it stays free to grow into, and the segment
 * grows less often. The engine does the same where segments unmap only under pressure, as PyTorch's do (no
 * `fragmentationLimit`: the pytorch preset and the CUDA default): the pytorch preset's mappings are then PyTorch's
 * (the trace-parity test checks them on traces recorded with expandable segments), and `pnpm bench:cuda` measures
 * the CUDA default with it. Where a fragmentation limit unmaps free pages eagerly (the best preset's default), the
 * rule is off: it keeps the free end of a segment free, the limit unmaps it, and the next step maps it again (one
 * map per step of a static-shape loop, TraceStaticShape.test.ts), so a request takes the smallest fitting block.
 * One difference from PyTorch remains: to remap unmapped space, PyTorch takes the lowest-address gap that fits (with
 * its free neighbours) and the engine the smallest one (#findGap). Gaps exist only after unmapping under pressure:
 * of the recorded traces only qwen3_train_expandable_3gpu_oom.dev1 unmaps, just before its out-of-memory error, and
 * remaps no gap after.
 */
function growableBytes<H>(b: Block<H>): number {
  if (b.next !== null) return b.next.mapped ? b.size : b.size + b.next.size;
  const segment = b.segment;
  return segment.expandable ? b.size + segment.memory.byteLength - segment.extentBytes : b.size;
}

function expandableKey(kind: number, stream: number, small: boolean): string {
  return `${kind}:${stream}:${small ? 's' : 'l'}`;
}

/**
 * Note [Expandable segments]: each (kind, stream, pool) has one segment that reserves a large address range
 * and maps device pages into it on demand. Blocks tile `[address, address + extentBytes)`; a block is mapped
 * (allocated, pending or free in the pool) or an unmapped gap. Under memory pressure (emptyCache, trim, the
 * out-of-memory chain) the whole pages inside every free block are unmapped, in the middle as well as at the
 * end, so their memory goes back to the device while the address range stays. To serve a request the engine
 * first remaps a gap that, with its free neighbours, is large enough, then grows the segment at its end
 * (extending a free last block). Mapping is page-granular: requests are placed exactly, pages are not.
 * With a `fragmentationLimit`, growing to a new peak first unmaps the free pages of every expandable segment
 * when growing would otherwise leave more than that fraction of allocated bytes free (free pages of another
 * stream's or pool's segment cost the device as much as this one's): peak reserved memory then stays within
 * the limit of peak live memory plus partial pages. A new peak is one of live bytes, or of mapped bytes more
 * than RESERVED_PEAK_SLACK above the most ever mapped (#atNewPeak). Only then: a loop that allocates the same
 * shapes every step would otherwise unmap at every step's peak and map again later; this way the pages a
 * first step unmapped are mapped again once, placement settles within the slack, and later steps map nothing.
 *
 * Pages are the segment's own (`segmentPageBytes`: one size per pool, PyTorch's 2 and 20 MiB in the pytorch preset,
 * the backend's granularity in the best preset); growth and unmapping are in whole pages.
 *
 * Note [Page runs]: a backend allocation is mapped and unmapped only whole (CUDA maps a physical allocation only
 * whole and only from its start). By default each page is one allocation, as PyTorch maps them: a growth of n pages
 * is n allocations, and any free page can go back. With `pageRuns`, a growth is one allocation (a run) of all its
 * pages: fewer backend calls (CUDA: three per growth instead of two per page and one), but a run goes back only once
 * all of it is free. `segment.runs` records the allocations mapped, and unmapping a free block gives back the runs
 * lying wholly inside it (for pages of one allocation each, its whole pages).
 *
 * Invariants: `#bySlot` holds one live, unretired expandable segment per (kind, stream, pool) that has one, and
 * each such segment of `state.segments` is listed; a segment's mappedBytes == the sizes of its mapped blocks;
 * `#peakReservedBytes` >= every value reserved bytes ever had.
 */
export class ExpandableSegments<H> {
  /** The expandable segment of each (kind, stream, pool), by expandableKey. */
  readonly #bySlot = new Map<string, Segment<H>>();
  /** The most bytes of pages ever mapped at once; never reset. */
  #peakReservedBytes = 0;
  /** Page bytes of new segments of the small and the large pool (Note [Expandable segments]); 0 without mapping. */
  readonly #pageBytes: { readonly small: number; readonly large: number };

  constructor(
    private readonly state: EngineState<H>,
    /** A cached block for `r` (CachingAllocator's #takeCached), after unmapping shrank an oversize free block. */
    private readonly takeCached: (r: Request<H>) => Block<H> | undefined,
  ) {
    const granularity = state.backend.pageMapping?.pageBytes ?? 0;
    const given = state.options.segmentPageBytes ?? (state.options.preset === 'pytorch' ? PYTORCH_PAGE_BYTES : { small: granularity, large: granularity });
    const round = (bytes: number): number => (granularity === 0 ? 0 : Math.ceil(bytes / granularity) * granularity);
    this.#pageBytes = { small: round(given.small), large: round(given.large) };
  }

  /**
   * The block a request takes when the smallest fitting free block of its pool, `block`, lies in an expandable
   * segment (Note [Best fit next to unmapped space]): `block` itself, or a larger block that leaves the free space
   * before the unmapped end of a segment (or before a gap) to grow into.
   */
  bestFit(pool: BlockPool<H>, block: Block<H>, size: number): Block<H> {
    const maxSplitSize = this.state.options.maxSplitSize;
    let fit = block;
    for (let next = pool.higher(fit); fit.segment.expandable && next !== undefined && growableBytes(next) < growableBytes(fit); next = pool.higher(fit)) {
      // A block the request may not take (oversize) ends the walk: PyTorch would refuse it, then serve the request
      // from the free block before the unmapped space without mapping anything, which is where the walk stands.
      if (!maySplitFor(next.size, size, maxSplitSize)) break;
      fit = next;
    }
    return fit;
  }

  /** Page bytes of a new expandable segment of the small or the large pool. */
  pageBytesOf(small: boolean): number {
    return small ? this.#pageBytes.small : this.#pageBytes.large;
  }

  /** The listed expandable segments, for the invariant check. */
  entries(): IterableIterator<[string, Segment<H>]> {
    return this.#bySlot.entries();
  }

  /** Whether `segment` is the listed expandable segment of its (kind, stream, pool). */
  isListed(segment: Segment<H>): boolean {
    return this.#bySlot.get(expandableKey(segment.kind, segment.stream, segment.small)) === segment;
  }

  /** Stops growing `segment` (it was retired; Note [Retired segments] in CachingAllocator.ts). */
  unlist(segment: Segment<H>): void {
    for (const [key, listed] of this.#bySlot) if (listed === segment) this.#bySlot.delete(key);
  }

  /** Forgets every segment (the engine is disposed and returned them). */
  clear(): void {
    this.#bySlot.clear();
  }

  // ---- growing and mapping ----------------------------------------------------------------------------------

  /** A free block for `r`, outside any pool, from remapped or new pages; undefined when there is no room. */
  grow(r: Request<H>): Block<H> | undefined {
    const state = this.state;
    const key = expandableKey(r.kind, r.stream, r.pool.small);
    let segment = this.#bySlot.get(key);
    const gap = segment ? this.#findGap(segment, r) : undefined;
    if (segment && gap) return this.#mapGap(segment, gap, r);
    // Growing to a new peak would leave more than the allowed share of reserved memory free: give back free
    // pages first, from every expandable segment.
    const allocated = state.stats.allocated_bytes.all.current + r.size;
    let grow = this.#tailGrowth(segment, r);
    if (this.#atNewPeak(allocated, grow) && state.reservedBytes + grow - allocated > state.options.fragmentationLimit * allocated) {
      this.unmapAllFreePages();
      // Unmapping shrinks an oversize free block to the partial pages at its ends, which the request may take.
      const cached = this.takeCached(r);
      if (cached) return cached;
      segment = this.#bySlot.get(key);
      const freed = segment ? this.#findGap(segment, r) : undefined;
      if (segment && freed) return this.#mapGap(segment, freed, r);
      grow = this.#tailGrowth(segment, r);
    }
    const mapping = state.backend.pageMapping!;
    const page = segment?.pageBytes ?? this.pageBytesOf(r.pool.small);
    const tail = segment && segment.extentBytes > 0 ? segment.tail : undefined;
    const tailFree = tail !== undefined && this.#mayExtend(tail, r);
    if (state.reservedBytes + grow > state.allowedBytes) return undefined;
    if (!segment) {
      // Address space is cheap and gaps fragment it: reserve several times the memory that can be mapped.
      const span = Math.min(2 ** 46, EXPANDABLE_RESERVE_FACTOR * (state.capacityBytes ?? 2 ** 42));
      const range = mapping.reserve(Math.ceil(span / page) * page, page);
      if (range === null) return undefined;
      segment = new Segment<H>(range, r.stream, r.kind, r.pool.small, true);
      segment.pageBytes = page;
    }
    if (segment.extentBytes + grow > segment.memory.byteLength) {
      if (segment.extentBytes === 0) mapping.release(segment.memory);
      return undefined;
    }
    const start = segment.address + segment.extentBytes;
    if (!this.#mapPages(segment, start, grow)) {
      if (segment.extentBytes === 0) mapping.release(segment.memory);
      return undefined;
    }
    if (!this.#bySlot.has(key)) {
      this.#bySlot.set(key, segment);
      state.segments.add(segment);
      state.stats.segment.add(segment.small, 1);
    }
    segment.extentBytes += grow;
    if (tailFree) {
      r.pool.remove(tail);
      tail.size += grow;
      state.queueSegmentEvent(true, start, grow);
      return tail;
    }
    const block = new Block<H>(segment, start, grow);
    if (tail) {
      tail.next = block;
      block.prev = tail;
    } else segment.head = block;
    segment.tail = block;
    state.queueSegmentEvent(true, start, grow);
    return block;
  }

  /**
   * Whether pages mapped next to `b` may join it to serve `r`: it is free in its pool and the max split size lets
   * `r` take it. Counting an oversize free neighbour's bytes would map less than `r` needs: nothing, or a negative
   * amount when it is larger than `r`.
   */
  #mayExtend(b: Block<H>, r: Request<H>): boolean {
    return isPooledFree(b) && maySplitFor(b.size, r.size, this.state.options.maxSplitSize);
  }

  /** Bytes of pages to map at the end of `segment` for `r`: less the free last block, when `r` may extend it. */
  #tailGrowth(segment: Segment<H> | undefined, r: Request<H>): number {
    const tail = segment && segment.extentBytes > 0 ? segment.tail : undefined;
    const need = tail !== undefined && this.#mayExtend(tail, r) ? r.size - tail.size : r.size;
    const page = segment?.pageBytes ?? this.pageBytesOf(r.pool.small);
    return Math.ceil(need / page) * page;
  }

  /**
   * A new peak (Note [Expandable segments]): of live bytes, or of mapped bytes beyond RESERVED_PEAK_SLACK of the
   * most ever mapped, were `mapBytes` more mapped now.
   */
  #atNewPeak(allocatedBytes: number, mapBytes: number): boolean {
    return allocatedBytes > this.state.peakLiveBytes || this.state.reservedBytes + mapBytes > this.#peakReservedBytes * (1 + RESERVED_PEAK_SLACK);
  }

  /**
   * The smallest gap of `segment` that, with its free neighbours, can hold `r` (its free neighbours are usually
   * partial pages), and the bytes of pages to map at its start. The scan is bounded (many small gaps next to
   * live blocks would make it linear); past the bound, the smallest gap that fits on its own.
   */
  #findGap(segment: Segment<H>, r: Request<H>): { gap: Block<H>; mapBytes: number } | undefined {
    if (segment.gaps.size === 0) return undefined;
    const page = segment.pageBytes;
    const usable = (b: Block<H> | null): number => (b !== null && this.#mayExtend(b, r) ? b.size : 0);
    const freeBefore = (gap: Block<H>): number => usable(gap.prev);
    let best: Block<H> | undefined;
    let gap = segment.gaps.lowerBound(segment.stream, r.size - 2 * page);
    for (let scanned = 0; gap !== undefined && gap.size < r.size && scanned < GAP_SCAN_LIMIT; scanned++) {
      if (freeBefore(gap) + gap.size + usable(gap.next) >= r.size) {
        best = gap;
        break;
      }
      gap = segment.gaps.higher(gap);
    }
    best ??= gap !== undefined && gap.size >= r.size ? gap : segment.gaps.lowerBound(segment.stream, r.size);
    if (best === undefined) return undefined;
    const need = r.size - freeBefore(best);
    return { gap: best, mapBytes: need >= best.size ? best.size : Math.ceil(need / page) * page };
  }

  /**
   * Maps the start of a gap found by #findGap and merges it with the free neighbours the request may take (and a
   * free block after it). Undefined when the limit or the device said no.
   */
  #mapGap(segment: Segment<H>, { gap, mapBytes }: { gap: Block<H>; mapBytes: number }, r: Request<H>): Block<H> | undefined {
    if (this.state.reservedBytes + mapBytes > this.state.allowedBytes) return undefined;
    if (!this.#mapPages(segment, gap.address, mapBytes)) return undefined;
    let mapped = gap;
    if (mapBytes < gap.size) {
      mapped = new Block<H>(segment, gap.address, mapBytes);
      mapped.prev = gap.prev;
      if (mapped.prev) mapped.prev.next = mapped;
      else segment.head = mapped;
      mapped.next = gap;
      gap.prev = mapped;
      segment.gaps.remove(gap);
      gap.address += mapBytes;
      gap.size -= mapBytes;
      segment.gaps.insert(gap);
    } else segment.gaps.remove(gap);
    mapped.mapped = true;
    const address = mapped.address;
    // A free neighbour joins only if the request may take it (#findGap counted it): merged with an oversize block
    // before it, the request would be placed at that block's start and split it. One after it may join: the
    // request takes the front.
    if (mapped.prev !== null && this.#mayExtend(mapped.prev, r)) tryMerge(mapped, mapped.prev, r.pool);
    tryMerge(mapped, mapped.next, r.pool);
    this.state.queueSegmentEvent(true, address, mapBytes);
    return mapped;
  }

  /**
   * Maps `bytes` of pages at `address` of an expandable segment and counts them as reserved. The caller queues
   * `segmentReserved` (Note [Segment events] in CachingAllocator.ts), once the segment is registered.
   */
  #mapPages(segment: Segment<H>, address: number, bytes: number): boolean {
    const state = this.state;
    const offset = segment.memory.byteOffset + (address - segment.address);
    const runBytes = state.options.pageRuns ? bytes : segment.pageBytes;
    if (!state.backend.pageMapping!.map(segment.memory, offset, bytes, runBytes)) return false;
    segment.runs!.add(address - segment.address, address - segment.address + bytes, runBytes);
    segment.mappedBytes += bytes;
    state.stats.reserved_bytes.add(segment.small, bytes);
    state.stats.num_device_alloc++;
    if (state.reservedBytes > this.#peakReservedBytes) this.#peakReservedBytes = state.reservedBytes;
    const history = state.history;
    if (history !== null) {
      const frames = history.record('segment_map', address, bytes, segment.stream);
      if (history.stacks && segment.frames === null) segment.frames = frames;
    }
    return true;
  }

  /** Unmaps `bytes` of pages at `address` of an expandable segment and counts them; the caller queues the event. */
  #unmapPages(segment: Segment<H>, address: number, bytes: number): void {
    const state = this.state;
    state.backend.pageMapping!.unmap(segment.memory, segment.memory.byteOffset + (address - segment.address), bytes);
    segment.runs!.remove(address - segment.address, address - segment.address + bytes);
    segment.mappedBytes -= bytes;
    state.stats.reserved_bytes.add(segment.small, -bytes);
    state.stats.num_device_free++;
    state.history?.record('segment_unmap', address, bytes, segment.stream);
  }

  // ---- unmapping free pages and returning segments -----------------------------------------------------------

  /** Unmaps the free pages of every listed expandable segment (#unmapFreePages). */
  unmapAllFreePages(): void {
    for (const segment of [...this.#bySlot.values()]) this.unmapFreePages(segment);
  }

  /**
   * Unmaps the whole pages inside every free block of an expandable segment (Note [Expandable segments]),
   * drops a trailing gap, and returns the segment's address range when nothing is left in it.
   */
  unmapFreePages(segment: Segment<H>): void {
    // Walk the segment's pool from the largest free block down to the page size: smaller blocks hold no whole
    // page, and what a sweep leaves behind is smaller than a page, so each sweep visits only blocks freed (or
    // merged) since the last one, never the live blocks.
    const state = this.state;
    const pool = state.poolsOf(segment.kind)[segment.small ? 0 : 1];
    const page = segment.pageBytes;
    for (let b = pool.largest(segment.stream); b !== undefined && b.size >= page; ) {
      const lower = pool.lower(b);
      if (b.segment === segment) this.#unmapInside(segment, b);
      b = lower;
    }
    const last = segment.extentBytes > 0 ? segment.tail : undefined;
    if (last && !last.mapped) {
      segment.gaps.remove(last);
      segment.extentBytes -= last.size;
      last.released = true;
      if (last.prev) {
        last.prev.next = null;
        segment.tail = last.prev;
      }
    }
    if (segment.extentBytes === 0) {
      state.segments.delete(segment);
      this.#bySlot.delete(expandableKey(segment.kind, segment.stream, segment.small));
      this.returnSegment(segment);
    }
  }

  /**
   * Unmaps what is still mapped of an expandable segment the caller already took out of `segments` and the pools,
   * releases its address range, and counts it out. Each run of mapped blocks is unmapped at once (runs start and end
   * on page boundaries, blocks need not) and counted as #unmapPages counts it; the segment leaves with one
   * segmentReleased for the bytes still mapped: none when #unmapFreePages has just unmapped every page (releasing
   * the address range frees no device memory).
   */
  returnSegment(segment: Segment<H>): void {
    const bytes = segment.mappedBytes;
    let run: Block<H> | null = null;
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; ; b = b.next) {
      if (b?.mapped) run ??= b;
      else if (run) {
        const end = b ? b.address : segment.address + segment.extentBytes;
        this.#unmapPages(segment, run.address, end - run.address);
        run = null;
      }
      if (!b) break;
    }
    this.state.backend.pageMapping!.release(segment.memory);
    segment.mappedBytes = 0;
    segment.extentBytes = 0;
    segment.gaps.clear();
    this.state.stats.segment.add(segment.small, -1);
    if (bytes > 0) this.state.queueSegmentEvent(false, segment.address, bytes);
  }

  /**
   * Unmaps the whole pages inside a free pooled block: the partial pages at either end stay mapped as free
   * blocks, the middle becomes a gap. Returns the bytes unmapped.
   */
  #unmapInside(segment: Segment<H>, b: Block<H>): number {
    const offset = b.address - segment.address;
    const inside = segment.runs!.inside(offset, offset + b.size);
    if (inside === undefined) return 0;
    const { start, end } = inside;
    const pool = this.state.poolOf(b);
    pool.remove(b);
    if (start > offset) {
      const front = new Block<H>(segment, b.address, start - offset);
      front.prev = b.prev;
      if (front.prev) front.prev.next = front;
      else segment.head = front;
      front.next = b;
      b.prev = front;
      b.address += front.size;
      b.size -= front.size;
      pool.insert(front);
    }
    if (end < b.address - segment.address + b.size) {
      const back = new Block<H>(segment, segment.address + end, b.address + b.size - (segment.address + end));
      back.next = b.next;
      if (back.next) back.next.prev = back;
      else segment.tail = back;
      back.prev = b;
      b.next = back;
      b.size -= back.size;
      pool.insert(back);
    }
    const bytes = b.size;
    const address = b.address;
    this.#unmapPages(segment, address, bytes);
    b.mapped = false;
    segment.gaps.insert(b);
    this.#mergeGaps(segment, b);
    this.state.queueSegmentEvent(false, address, bytes); // once the gap is in place
    return bytes;
  }

  /** Merges an unmapped gap with unmapped neighbours. */
  #mergeGaps(segment: Segment<H>, gap: Block<H>): void {
    if (gap.next && !gap.next.mapped) this.#absorbNextGap(segment, gap);
    if (gap.prev && !gap.prev.mapped) this.#absorbNextGap(segment, gap.prev);
  }

  /** Folds the gap after `gap` into it, keeping the size-ordered gap tree right. */
  #absorbNextGap(segment: Segment<H>, gap: Block<H>): void {
    const next = gap.next!;
    segment.gaps.remove(next);
    segment.gaps.remove(gap);
    gap.size += next.size;
    gap.next = next.next;
    if (gap.next) gap.next.prev = gap;
    else segment.tail = gap;
    segment.gaps.insert(gap);
  }
}
