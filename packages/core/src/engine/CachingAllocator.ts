/**
 * The caching engine: a device-agnostic caching allocator over a MemoryBackend, after PyTorch's CUDA caching
 * allocator ("Yet another caching allocator").
 *
 * - Requests round up to 512 bytes (or power-of-two divisions); up to 1 MiB they come from the small pool,
 *   backed by 2 MiB segments; larger ones from the large pool, backed by 20 MiB segments (under 10 MiB) or
 *   segments of their own size rounded to 2 MiB.
 * - A request takes the best-fitting free block of its pool and stream, ordered by (size, address), and splits
 *   it when the remainder is worth keeping (small pool: >= 512 B; large pool: > 1 MiB and the request is under
 *   the max split size). Blocks of at least the max split size serve only requests near their size.
 * - A free block merges with free neighbours in its segment at once, so free space never fragments further
 *   than allocations force it to.
 * - Blocks belong to the stream that allocated them. A block used on other streams (`recordStream`) returns to
 *   the pool only once events recorded on those streams at free time have completed (Note [Stream-ordered reuse]).
 * - When no block fits: garbage-collect old cached segments if over the threshold, ask the backend for a new
 *   segment, then free cached oversize blocks and retry, then free every unsplit cached segment and retry, then
 *   call the reclaimers (IPC, then LMS), and only then throw OutOfMemoryError (Note [Out-of-memory chain]).
 * - With expandable segments, each (stream, pool) grows one segment by mapping pages at its end instead of
 *   reserving new fixed segments; freed pages at the end are unmapped by emptyCache/trim.
 * - Statistics use PyTorch's names and meanings; `snapshot()` uses PyTorch's snapshot schema.
 */
import type { AllocateOptions } from '../Allocator.js';
import { DataPtr } from '../DataPtr.js';
import { formatDevice } from '../Device.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import { AllocatorBase } from '../internal/AllocatorBase.js';
import { checkByteCount, checkOptions } from '../internal/validate.js';
import type { MemoryBackend, StreamId } from '../MemoryBackend.js';
import type { MemoryBlock } from '../MemoryBlock.js';
import type { MemorySnapshot, SnapshotBlock, SnapshotSegment } from '../MemorySnapshot.js';
import { Block, Segment } from './Block.js';
import { BlockPool } from './BlockPool.js';
import type { CachingAllocatorOptions, ResolvedCachingOptions } from './CachingAllocatorOptions.js';
import { resolveCachingOptions } from './CachingAllocatorOptions.js';
import { EventQueue } from './EventQueue.js';
import type { HistoryOptions } from './History.js';
import { History } from './History.js';
import { isSmallRequest, LARGE_ROUNDING_BYTES, LARGE_SEGMENT_BYTES, MIN_BLOCK_BYTES, ROUNDUP_INTERVALS, roundSize, segmentSize, SMALL_REQUEST_MAX_BYTES } from './SizeClass.js';

/** The options of a call that passed none: one shared object, not a new one per call. */
const NO_OPTIONS: AllocateOptions = Object.freeze({});

/** The context of a zero-byte pointer: no block, nothing to free but the count. */
const ZERO_BYTES = Symbol('zero-byte allocation');

/** Quick lists hold at most this many blocks per size, and at most 1/QUICK_SHARE_DIVISOR of reserved bytes. */
const QUICK_LIST_MAX = 32;
const QUICK_SHARE_DIVISOR = 32;
/** Gaps that need their free neighbours to fit a request, examined at most per request (Note [Expandable segments]). */
const GAP_SCAN_LIMIT = 64;
/** Mapping within this fraction above the most ever mapped is not a new peak (Note [Expandable segments]). */
const RESERVED_PEAK_SLACK = 0.01;
/** An expandable segment reserves this many times the device capacity in address space (gaps fragment it). */
const EXPANDABLE_RESERVE_FACTOR = 8;

/** A numeric key for (kind < 16, stream < 1024, size < 512 GiB), or -1 when out of that range. */
function quickKey(kind: number, stream: number, size: number): number {
  if (kind >= 16 || stream >= 1024 || size >= 2 ** 39) return -1;
  return (size * 1024 + stream) * 16 + kind;
}

/** True for a block that sits in its pool: mapped, free, not quick-listed, no pending events or stream uses. */
function isPooledFree<H>(b: Block<H>): boolean {
  return !b.allocated && b.mapped && !b.quick && b.eventCount === 0 && (b.streamUses === null || b.streamUses.size === 0);
}

/**
 * Whether a free block of `blockBytes` may serve a request of `size` under the max split size: an oversize block
 * never serves a request that could split a smaller one, nor serves an oversize request much smaller than itself.
 */
function maySplitFor(blockBytes: number, size: number, maxSplit: number): boolean {
  return size < maxSplit ? blockBytes < maxSplit : blockBytes < size + LARGE_SEGMENT_BYTES;
}

function expandableKey(kind: number, stream: number, small: boolean): string {
  return `${kind}:${stream}:${small ? 's' : 'l'}`;
}

/** One request on its way through the allocation path. */
interface Request<H> {
  readonly stream: StreamId;
  readonly kind: number;
  /** Rounded size. */
  readonly size: number;
  readonly pool: BlockPool<H>;
}

/**
 * A caching allocator over any MemoryBackend. See the file header for the algorithm.
 *
 * Invariants (checked by `assertInvariants()`):
 * - the blocks of every segment tile it exactly: head.address == segment address, each next starts where its
 *   prev ends, and the sizes add up to the segment's mapped bytes;
 * - every free block is in its pool, no two free blocks are neighbours (they would have merged);
 * - reserved_bytes == sum of mapped segment bytes; allocated_bytes == sum of allocated block sizes;
 *   active_bytes == allocated + pending-free block sizes; requested_bytes == requested sizes of the same blocks
 *   (as in PyTorch, a block leaves requested_bytes when it leaves active_bytes).
 */
export class CachingAllocator<H = unknown> extends AllocatorBase<H> {
  readonly backend: MemoryBackend<H>;
  readonly options: ResolvedCachingOptions;
  /** Small and large pools per segment kind (Note [Segment kinds]). */
  readonly #pools = new Map<number, readonly [small: BlockPool<H>, large: BlockPool<H>]>();
  readonly #segments = new Set<Segment<H>>();
  /** The expandable segment of each (kind, stream, pool). */
  readonly #expandable = new Map<string, Segment<H>>();
  /** Note [Deferred coalescing]: freed blocks by quickKey(kind, stream, size), not yet merged. */
  readonly #quick = new Map<number, Block<H>[]>();
  #quickBytes = 0;
  /** Per stream, events recorded at free time and the blocks waiting on them, oldest first. */
  readonly #pendingEvents = new Map<StreamId, EventQueue<H>>();
  /** The queues of #pendingEvents, for the hot path's loop (no Map iterator). */
  readonly #eventQueues: EventQueue<H>[] = [];
  #pendingCount = 0;
  /** The most bytes ever allocated at once; unlike the peak statistic, never reset (Note [Expandable segments]). */
  #peakLiveBytes = 0;
  /** The most bytes of pages ever mapped at once; never reset (Note [Expandable segments]). */
  #peakReservedBytes = 0;
  /**
   * Note [Segment events]: `segmentReserved` and `segmentReleased` are queued while the engine works and emitted
   * by #emitSegmentEvents once its state is whole: after the request that reserved memory has its block (until
   * then the new block is free but outside the pool, and a listener that allocates must not be handed it), and
   * after a sweep or release loop has finished (a listener that allocates or frees mid-loop would change the
   * blocks and segments the loop is walking).
   */
  readonly #segmentEvents: { reserved: boolean; address: number; bytes: number }[] = [];
  /** Bytes the limit allows; Infinity without a limit. */
  readonly #allowedBytes: number;
  #history: History | null = null;

  constructor(backend: MemoryBackend<H>, options: CachingAllocatorOptions = {}) {
    super(backend.device, backend.alignment, backend);
    this.backend = backend;
    this.options = resolveCachingOptions(options);
    const limit = this.options.memoryLimit;
    if (limit === undefined) this.#allowedBytes = Number.POSITIVE_INFINITY;
    else if (typeof limit === 'number') this.#allowedBytes = limit;
    else if (backend.capacityBytes !== undefined) this.#allowedBytes = Math.floor(limit.fraction * backend.capacityBytes);
    else throw new InvalidArgumentError('options.memoryLimit', limit, `bytes: ${formatDevice(backend.device)} does not report its capacity`);
    this.stats.max_split_size = this.options.maxSplitSize === Number.MAX_SAFE_INTEGER ? -1 : this.options.maxSplitSize;
  }

  /** Bytes the engine may reserve: the memory limit, else the backend's capacity (undefined when unknown). */
  get capacityBytes(): number | undefined {
    return Number.isFinite(this.#allowedBytes) ? this.#allowedBytes : this.backend.capacityBytes;
  }

  /** Bytes reserved from the backend right now. */
  get reservedBytes(): number {
    return this.stats.reservedBytes;
  }

  allocate(nbytes: number, options: AllocateOptions = NO_OPTIONS): DataPtr<H> {
    this.checkOpen('allocate');
    checkByteCount('nbytes', nbytes);
    checkOptions('options', options);
    const stream = options.stream ?? this.backend.defaultStream;
    if (!this.backend.isStream(stream)) throw new InvalidArgumentError('options.stream', stream, `a stream of ${formatDevice(this.device)}`);
    if (nbytes === 0) return this.#allocateZero();
    if (this.#pendingCount > 0) this.#processEvents();
    const size = roundSize(nbytes, this.options.roundupPower2Divisions);
    const small = !this.options.unifiedPools && isSmallRequest(size);
    const kind = this.backend.segmentKind?.(options) ?? 0;
    const request: Request<H> = { stream, kind, size, pool: this.#poolsOf(kind)[small ? 0 : 1] };
    let block: Block<H>;
    try {
      block =
        this.#takeCached(request) ??
        (this.#flushQuickLists() ? this.#takeCached(request) : undefined) ??
        this.#reserveBlock(request, nbytes);
    } catch (error) {
      this.#emitSegmentEvents(); // out of memory: what was released on the way is still reported
      throw error;
    }
    return this.#allocateFound(block, request, nbytes);
  }

  /**
   * Marks `ptr` as used on `stream`, so that when freed its block is reused only after the work queued on
   * `stream` so far has completed.
   * @throws UseAfterReleaseError for a released pointer; ForeignPointerError for one this engine does not own;
   * InvalidArgumentError for an unknown stream
   */
  recordStream(ptr: DataPtr, stream: StreamId): void {
    this.checkOpen('recordStream');
    if (ptr instanceof DataPtr && ptr.isReleased) {
      throw new UseAfterReleaseError(`Cannot record a stream on the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)}: it was freed.`);
    }
    this.checkPtr('ptr', ptr, true);
    if (!this.backend.isStream(stream)) throw new InvalidArgumentError('stream', stream, `a stream of ${formatDevice(this.device)}`);
    const block = ptr.context as Block<H> | typeof ZERO_BYTES;
    if (block === ZERO_BYTES || stream === block.stream) return;
    (block.streamUses ??= new Set()).add(stream);
  }

  /**
   * Note [Segment kinds]: a backend may hold segments that are not interchangeable (host memory that is shared
   * or not; WebGPU buffers of different usages). `segmentKind(options)` names the kind a request needs; each
   * kind has its own pools and expandable segments, and a block never serves a request of another kind.
   */
  #poolsOf(kind: number): readonly [BlockPool<H>, BlockPool<H>] {
    let pools = this.#pools.get(kind);
    if (!pools) {
      this.#pools.set(kind, (pools = [new BlockPool<H>(true), new BlockPool<H>(false)]));
    }
    return pools;
  }

  #poolOf(block: Block<H>): BlockPool<H> {
    return this.#poolsOf(block.segment.kind)[block.small ? 0 : 1];
  }

  /** Every pool, large pools first. */
  #allPools(): BlockPool<H>[] {
    const pools = [...this.#pools.values()];
    return [...pools.map((p) => p[1]), ...pools.map((p) => p[0])];
  }

  /** Frees cached blocks: every unsplit free segment, and the unmapped tail pages of expandable segments. */
  emptyCache(): void {
    this.checkOpen('emptyCache');
    this.#releaseCachedBlocks();
    this.#emitSegmentEvents();
  }

  /**
   * Releases cached segments, largest first, until reserved bytes are at most `targetBytes` or nothing cached is
   * left. Returns the reserved bytes afterwards.
   */
  trim(targetBytes: number): number {
    this.checkOpen('trim');
    checkByteCount('targetBytes', targetBytes);
    this.#synchronizeEvents();
    this.#flushQuickLists();
    const releasable = this.#allPools().flatMap((pool) => [...pool.blocks()]).filter((b) => !b.isSplit && !b.segment.expandable);
    releasable.sort((a, b) => b.size - a.size);
    for (const block of releasable) {
      if (this.reservedBytes <= targetBytes) break;
      this.#releaseSegment(block);
    }
    if (this.reservedBytes > targetBytes) for (const segment of [...this.#expandable.values()]) this.#unmapFreePages(segment);
    this.#emitSegmentEvents();
    return this.reservedBytes;
  }

  /** Starts (or, with `false`, stops) recording a bounded trace of events, returned by `snapshot()`. */
  recordHistory(options: HistoryOptions | false = {}): void {
    if (options === false) {
      this.#history = null;
      return;
    }
    const maxEntries = options.maxEntries ?? 10_000;
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) throw new InvalidArgumentError('options.maxEntries', maxEntries, 'a positive integer');
    this.#history = new History({ ...options, maxEntries });
  }

  snapshot(): MemorySnapshot {
    this.checkOpen('snapshot');
    const segments: SnapshotSegment[] = [];
    for (const segment of this.#segments) this.#snapshotSegment(segment, segments);
    segments.sort((a, b) => a.address - b.address);
    return { segments, device_traces: [this.#history?.entries() ?? []], allocator_settings: this.#settings(), external_annotations: [] };
  }

  /** The live pointers whose memory lies in the backend segment with handle `handle` (for failure reports). */
  protected livePointersIn(handle: H): DataPtr<H>[] {
    const ptrs: DataPtr<H>[] = [];
    for (const segment of this.#segments) {
      if (segment.memory.handle !== handle) continue;
      for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) if (b.allocated && b.ptr) ptrs.push(b.ptr);
    }
    return ptrs;
  }

  /** Every live pointer (for failure reports). */
  protected livePointers(): DataPtr<H>[] {
    return [...this.#segments].flatMap((segment) => this.livePointersIn(segment.memory.handle));
  }

  /**
   * Checks every invariant listed on the class against a full recount, throwing an Error that names the first
   * one broken. For tests; O(blocks).
   */
  assertInvariants(): void {
    const fail = (what: string): never => {
      throw new Error(`CachingAllocator invariant broken: ${what}`);
    };
    let reserved = 0;
    let allocated = 0;
    let active = 0;
    let requested = 0;
    let freeBlocks = 0;
    let quickBlocks = 0;
    for (const segment of this.#segments) {
      reserved += segment.mappedBytes;
      let expected = segment.address;
      let mapped = 0;
      let prev: Block<H> | null = null;
      for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) {
        if (b.prev !== prev) fail(`block at 0x${b.address.toString(16)} has a wrong prev link`);
        if (b.address !== expected) fail(`block at 0x${b.address.toString(16)} should start at 0x${expected.toString(16)}`);
        if (b.segment !== segment) fail(`block at 0x${b.address.toString(16)} names another segment`);
        expected += b.size;
        if (!b.mapped) {
          if (!segment.gaps.has(b)) fail(`the gap at 0x${b.address.toString(16)} is not listed`);
          if (prev && !prev.mapped) fail(`gaps at 0x${prev.address.toString(16)} and 0x${b.address.toString(16)} did not merge`);
        } else if (b.allocated) {
          mapped += b.size;
          allocated += b.size;
          active += b.size;
          requested += b.requestedSize;
        } else if (b.eventCount > 0) {
          mapped += b.size;
          active += b.size;
          requested += b.requestedSize;
        } else if (b.quick) {
          mapped += b.size;
          quickBlocks++;
        } else if (segment.retired) {
          mapped += b.size; // out of service, in no pool (Note [Retired segments])
        } else {
          mapped += b.size;
          freeBlocks++;
          if (prev && isPooledFree(prev)) fail(`free blocks at 0x${prev.address.toString(16)} and 0x${b.address.toString(16)} did not merge`);
          if (!this.#poolOf(b).has(b)) fail(`free block at 0x${b.address.toString(16)} is not in its pool`);
        }
        prev = b;
      }
      if (segment.retired) {
        let busy = false;
        for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) busy ||= b.allocated || b.eventCount > 0;
        if (!busy) fail(`the retired segment at 0x${segment.address.toString(16)} has nothing in use but was not returned`);
      }
      if (segment.extentBytes > 0 && segment.tail !== prev) fail(`the segment at 0x${segment.address.toString(16)} has a stale tail`);
      if (expected !== segment.address + segment.extentBytes) fail(`the blocks of the segment at 0x${segment.address.toString(16)} do not add up to its ${segment.extentBytes} bytes`);
      if (mapped !== segment.mappedBytes) fail(`the segment at 0x${segment.address.toString(16)} maps ${segment.mappedBytes} bytes but its mapped blocks add up to ${mapped}`);
    }
    const pooled = this.#allPools().reduce((n, pool) => n + pool.size, 0);
    if (freeBlocks !== pooled) fail(`${freeBlocks} free blocks in segments but ${pooled} in pools`);
    const listed = [...this.#quick.values()].reduce((n, list) => n + list.length, 0);
    if (quickBlocks !== listed) fail(`${quickBlocks} quick-listed blocks in segments but ${listed} in quick lists`);
    const s = this.stats;
    if (s.reserved_bytes.all.current !== reserved) fail(`reserved_bytes ${s.reserved_bytes.all.current} != recount ${reserved}`);
    if (s.allocated_bytes.all.current !== allocated) fail(`allocated_bytes ${s.allocated_bytes.all.current} != recount ${allocated}`);
    if (s.active_bytes.all.current !== active) fail(`active_bytes ${s.active_bytes.all.current} != recount ${active}`);
    if (s.requested_bytes.all.current !== requested) fail(`requested_bytes ${s.requested_bytes.all.current} != recount ${requested}`);
    if (s.segment.all.current !== this.#segments.size) fail(`segment count ${s.segment.all.current} != ${this.#segments.size} segments`);
    for (const [key, segment] of this.#expandable) {
      if (!this.#segments.has(segment)) fail(`the expandable segment for ${key} was returned`);
    }
    for (const segment of this.#segments) {
      if (segment.expandable && !segment.retired && this.#expandable.get(expandableKey(segment.kind, segment.stream, segment.small)) !== segment) {
        fail(`the expandable segment at 0x${segment.address.toString(16)} is not listed`);
      }
    }
  }

  protected releaseAllocation(context: unknown): void {
    if (context === ZERO_BYTES) {
      if (!this.isDisposed) this.stats.allocation.add(true, -1);
      return;
    }
    const block = context as Block<H>;
    if (block.released) return; // the engine was disposed while the pointer lived
    // The caller freed the block: it leaves the allocated stats now, and goes to the pool now or once its events
    // complete.
    const small = block.small;
    block.allocated = false;
    const ptr = block.ptr!;
    block.ptr = null;
    this.stats.countFreed(small, block.size);
    // As PyTorch's free(): an oversize allocation stops counting when the caller frees it, events or not.
    if (block.size >= this.options.maxSplitSize) this.stats.oversize_allocations.add(-1);
    this.#history?.record('free_requested', block.address, block.requestedSize, block.stream);
    if (block.streamUses !== null && block.streamUses.size > 0) this.#insertEvents(block, block.streamUses);
    else if (this.backend.deferredFree) this.#insertEvent(block, block.stream);
    else this.#freeBlock(block);
    if (this.emitter.hears('freed')) this.emitter.safeEmit('freed', { ptr });
    if (this.#segmentEvents.length > 0) this.#emitSegmentEvents(); // a retired segment went back
  }

  /**
   * Note [Retired segments]: a backend may learn only later that a segment is unusable (WebGPU reports a
   * buffer the device rejected asynchronously, after blocks of it were handed out). Retiring it takes it out of
   * service: its free blocks leave the pools and quick lists, a block freed later is not pooled again, and the
   * segment goes back to the backend once nothing in it is allocated or waiting on an event. Returns whether
   * a segment had that handle.
   */
  protected retireSegment(handle: H): boolean {
    let found = false;
    for (const segment of [...this.#segments]) {
      if (segment.memory.handle !== handle || segment.retired) continue;
      if (!found) this.#flushQuickLists(); // every free block merged and in its pool
      found = true;
      segment.retired = true;
      for (const [key, expandable] of this.#expandable) if (expandable === segment) this.#expandable.delete(key);
      for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) {
        if (!isPooledFree(b)) continue;
        this.#poolOf(b).remove(b);
        if (b.isSplit && !segment.expandable) {
          this.stats.inactive_split.add(b.small, -1);
          this.stats.inactive_split_bytes.add(b.small, -b.size);
        }
      }
      this.#releaseIfIdle(segment);
    }
    this.#emitSegmentEvents();
    return found;
  }

  /** Returns a retired segment to the backend when nothing in it is allocated or pending. */
  #releaseIfIdle(segment: Segment<H>): void {
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) if (b.allocated || b.eventCount > 0) return;
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) b.released = true;
    this.#segments.delete(segment);
    this.#returnToBackend(segment);
  }

  protected disposeResources(): void {
    for (const segment of this.#segments) {
      for (let b: Block<H> | null = segment.head; b; b = b.next) b.released = true;
      this.#returnToBackend(segment);
    }
    this.#segments.clear();
    this.#expandable.clear();
    this.#pendingEvents.clear();
    this.#eventQueues.length = 0;
    this.#pendingCount = 0;
    this.#quick.clear();
    this.#quickBytes = 0;
    this.#emitSegmentEvents();
  }

  // ---- allocation path ------------------------------------------------------------------------------------

  #allocateZero(): DataPtr<H> {
    this.stats.allocation.add(true, 1);
    return new DataPtr<H>({
      device: this.device,
      byteLength: 0,
      handle: null as H,
      byteOffset: 0,
      address: 0,
      context: ZERO_BYTES,
      deleter: this.deleter,
    });
  }

  /**
   * A cached block for the request, taken out of its quick list or pool: one of exactly its size that a quick
   * list holds (Note [Deferred coalescing]), else the best fit in its pool and stream, honouring the max split
   * size. Undefined when none.
   *
   * Note [Few large functions on the hot path]: Node 20's V8 optimizes a function after it has run a number of
   * 66 KB budgets of its own bytecode: three, plus one per 150 bytes of its length (`--trace-opt-verbose`).
   * - A short function called once per operation therefore needs 2,000–3,500 calls, more than the first pass of
   *   most traces, so the second pass (a training program's second step, the WebGPU bench's warm pass) ran
   *   partly unoptimized, while V8's compiler threads took the machine's other core.
   * - Code that never runs on the hot path (building error messages) lengthens a function without spending its
   *   budget, so it lives in functions of its own (AllocatorBase's checkPtr).
   * - The hot path is a few longer functions: the quick list and the pool search here, the caller's free in
   *   releaseAllocation, event completion in #processEvents. On the compiled-step trace, replayed with the engine
   *   alone, 7 of its functions were still unoptimized after the first pass, against 10 before this change.
   */
  #takeCached(r: Request<H>): Block<H> | undefined {
    if (this.#quickBytes > 0) {
      const quick = this.#quick.get(quickKey(r.kind, r.stream, r.size))?.pop();
      if (quick !== undefined) {
        quick.quick = false;
        this.#quickBytes -= quick.size;
        return quick;
      }
    }
    const pool = r.pool;
    if (this.options.garbageCollectionThreshold > 0) pool.searchCount++;
    const block = pool.lowerBound(r.stream, r.size);
    if (block === undefined) return undefined;
    if (!maySplitFor(block.size, r.size, this.options.maxSplitSize)) return undefined;
    pool.remove(block);
    return block;
  }

  /**
   * Note [Out-of-memory chain]: no cached block fits. In order: garbage-collect (with a threshold), reserve a
   * new segment, release cached oversize blocks and retry, release every unsplit cached segment and retry,
   * then each reclaimer in turn (IPC collect, LMS reclaim) followed by a retry, and only then throw. Each step
   * runs only when the previous one failed, so a device with room never loses its cache. A retry after a
   * reclaimer looks in the quick lists as well as the pools (#takeCached), so a block of exactly the request's
   * size that the reclaimer freed serves it before any cached segment is released.
   */
  #reserveBlock(r: Request<H>, nbytes: number): Block<H> {
    if (this.options.garbageCollectionThreshold > 0) this.#garbageCollect();
    let block =
      this.#newSegmentBlock(r, false) ??
      (this.#releaseAvailableCachedBlocks(r) ? this.#newSegmentBlock(r, false) : undefined) ??
      // Releasing the cache completes pending frees and merges quick lists: a block may fit now.
      (this.#releaseCachedBlocks() ? (this.#takeCached(r) ?? this.#newSegmentBlock(r, true)) : undefined);
    if (block) return block;
    for (const reclaimer of this.options.reclaimers()) {
      if (reclaimer.reclaim(this.device, r.size) <= 0) continue;
      // What the reclaimer freed went to this engine's cache: look there, then release the cache and retry.
      if (this.#pendingCount > 0) this.#processEvents();
      block = this.#takeCached(r) ?? (this.#releaseCachedBlocks() ? (this.#takeCached(r) ?? this.#newSegmentBlock(r, true)) : undefined);
      if (block) return block;
    }
    return this.#throwOutOfMemory(nbytes);
  }

  /** What a custom `segmentSize` returned, when it is a whole byte count. @throws InvalidArgumentError otherwise */
  #checkedSegmentSize(bytes: number): number {
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new InvalidArgumentError('options.segmentSize', bytes, 'a function returning a whole byte count');
    return bytes;
  }

  /**
   * The bytes of a custom-sized segment for a request of `size`: at least the request, and for a request under the
   * max split size less than it. A segment at or above the max split size would leave the request an oversize
   * remainder that no request under the max split size may take (maySplitFor) and that, split, is never
   * released: every such request would then reserve a segment of its own. The cap is the largest multiple of
   * 2 MiB under the max split size, as PyTorch's 20 MiB segments are always under its max split size.
   */
  #customSegmentBytes(sized: NonNullable<ResolvedCachingOptions['segmentSize']>, size: number): number {
    const bytes = Math.max(size, this.#checkedSegmentSize(sized(size, this.reservedBytes)));
    const maxSplit = this.options.maxSplitSize;
    if (size >= maxSplit || bytes < maxSplit) return bytes;
    return Math.max(size, Math.ceil(maxSplit / LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES - LARGE_ROUNDING_BYTES);
  }

  #throwOutOfMemory(nbytes: number): never {
    this.#emitSegmentEvents(); // what the chain released goes out first: listeners then see whole state
    this.stats.num_ooms++;
    const free = this.capacityBytes === undefined ? undefined : Math.max(0, this.capacityBytes - this.reservedBytes);
    this.#history?.record('oom', 0, nbytes, this.backend.defaultStream, free === undefined ? undefined : { device_free: free });
    const stats = this.memoryStats();
    this.emitter.safeEmit('outOfMemory', { requestedBytes: nbytes, stats });
    const hint = this.backend.outOfMemoryHint?.(nbytes);
    throw new OutOfMemoryError({ device: this.device, requestedBytes: nbytes, capacityBytes: this.capacityBytes, stats, ...(hint === undefined ? {} : { hint }) });
  }

  /** Asks the backend for a new segment (or expandable pages) for `r`; undefined when it has no room. */
  #newSegmentBlock(r: Request<H>, isRetry: boolean): Block<H> | undefined {
    if (isRetry) this.stats.num_alloc_retries++;
    if (this.options.expandableSegments && this.backend.pageMapping) return this.#growExpandable(r);
    const sized = this.options.segmentSize;
    let bytes = sized ? this.#customSegmentBytes(sized, r.size) : segmentSize(r.size);
    let memory = this.#mallocWithinLimit(bytes, r);
    if (memory === null && sized && bytes > segmentSize(r.size)) {
      // A large custom segment did not fit what is left: PyTorch's smaller size may.
      bytes = segmentSize(r.size);
      memory = this.#mallocWithinLimit(bytes, r);
    }
    if (memory === null && sized && bytes > r.size) {
      // Nor PyTorch's, rounded up to 2 MiB: a segment of just the request may still fit a budget that is not a
      // multiple of 2 MiB.
      bytes = r.size;
      memory = this.#mallocWithinLimit(bytes, r);
    }
    if (memory === null) return undefined;
    const segment = new Segment<H>(memory, r.stream, r.kind, r.pool.small, false);
    const block = new Block<H>(segment, memory.address, bytes);
    segment.head = block;
    segment.tail = block;
    this.#segments.add(segment);
    this.#countSegment(segment, bytes, 1);
    this.#history?.record('segment_alloc', memory.address, bytes, r.stream);
    return block;
  }

  #mallocWithinLimit(bytes: number, r: Request<H>): MemoryBlock<H> | null {
    if (this.reservedBytes + bytes > this.#allowedBytes) return null;
    return this.backend.malloc(bytes, { stream: r.stream, kind: r.kind });
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
   * first step unmapped are mapped again once, placement settles within the slack, and later steps map nothing
   * (the static-shape scenarios of bench/engine.bench.ts: every PyTorch trace settles, most by the third step).
   */
  #growExpandable(r: Request<H>): Block<H> | undefined {
    const key = expandableKey(r.kind, r.stream, r.pool.small);
    let segment = this.#expandable.get(key);
    const gap = segment ? this.#findGap(segment, r) : undefined;
    if (segment && gap) return this.#mapGap(segment, gap, r);
    // Growing to a new peak would leave more than the allowed share of reserved memory free: give back free
    // pages first, from every expandable segment.
    const allocated = this.stats.allocated_bytes.all.current + r.size;
    let grow = this.#tailGrowth(segment, r);
    if (this.#atNewPeak(allocated, grow) && this.reservedBytes + grow - allocated > this.options.fragmentationLimit * allocated) {
      for (const other of [...this.#expandable.values()]) this.#unmapFreePages(other);
      // Unmapping shrinks an oversize free block to the partial pages at its ends, which the request may take.
      const cached = this.#takeCached(r);
      if (cached) return cached;
      segment = this.#expandable.get(key);
      const freed = segment ? this.#findGap(segment, r) : undefined;
      if (segment && freed) return this.#mapGap(segment, freed, r);
      grow = this.#tailGrowth(segment, r);
    }
    const mapping = this.backend.pageMapping!;
    const page = mapping.pageBytes;
    const tail = segment && segment.extentBytes > 0 ? segment.tail : undefined;
    const tailFree = tail !== undefined && this.#mayExtend(tail, r);
    if (this.reservedBytes + grow > this.#allowedBytes) return undefined;
    if (!segment) {
      // Address space is cheap and gaps fragment it: reserve several times the memory that can be mapped.
      const span = Math.min(2 ** 46, EXPANDABLE_RESERVE_FACTOR * (this.capacityBytes ?? 2 ** 42));
      const range = mapping.reserve(Math.ceil(span / page) * page);
      if (range === null) return undefined;
      segment = new Segment<H>(range, r.stream, r.kind, r.pool.small, true);
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
    if (!this.#expandable.has(key)) {
      this.#expandable.set(key, segment);
      this.#segments.add(segment);
      this.stats.segment.add(segment.small, 1);
    }
    segment.extentBytes += grow;
    if (tailFree) {
      r.pool.remove(tail);
      tail.size += grow;
      this.#segmentEvents.push({ reserved: true, address: start, bytes: grow });
      return tail;
    }
    const block = new Block<H>(segment, start, grow);
    if (tail) {
      tail.next = block;
      block.prev = tail;
    } else segment.head = block;
    segment.tail = block;
    this.#segmentEvents.push({ reserved: true, address: start, bytes: grow });
    return block;
  }

  /**
   * Whether pages mapped next to `b` may join it to serve `r`: it is free in its pool and the max split size lets
   * `r` take it. Counting an oversize free neighbour's bytes would map less than `r` needs: nothing, or a negative
   * amount when it is larger than `r`.
   */
  #mayExtend(b: Block<H>, r: Request<H>): boolean {
    return isPooledFree(b) && maySplitFor(b.size, r.size, this.options.maxSplitSize);
  }

  /** Bytes of pages to map at the end of `segment` for `r`: less the free last block, when `r` may extend it. */
  #tailGrowth(segment: Segment<H> | undefined, r: Request<H>): number {
    const tail = segment && segment.extentBytes > 0 ? segment.tail : undefined;
    const need = tail !== undefined && this.#mayExtend(tail, r) ? r.size - tail.size : r.size;
    return Math.ceil(need / this.backend.pageMapping!.pageBytes) * this.backend.pageMapping!.pageBytes;
  }

  /**
   * A new peak (Note [Expandable segments]): of live bytes, or of mapped bytes beyond RESERVED_PEAK_SLACK of the
   * most ever mapped, were `mapBytes` more mapped now.
   */
  #atNewPeak(allocatedBytes: number, mapBytes: number): boolean {
    return allocatedBytes > this.#peakLiveBytes || this.reservedBytes + mapBytes > this.#peakReservedBytes * (1 + RESERVED_PEAK_SLACK);
  }

  /**
   * The smallest gap of `segment` that, with its free neighbours, can hold `r` (its free neighbours are usually
   * partial pages), and the bytes of pages to map at its start. The scan is bounded (many small gaps next to
   * live blocks would make it linear); past the bound, the smallest gap that fits on its own.
   */
  #findGap(segment: Segment<H>, r: Request<H>): { gap: Block<H>; mapBytes: number } | undefined {
    if (segment.gaps.size === 0) return undefined;
    const page = this.backend.pageMapping!.pageBytes;
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
    if (this.reservedBytes + mapBytes > this.#allowedBytes) return undefined;
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
    if (mapped.prev !== null && this.#mayExtend(mapped.prev, r)) this.#tryMerge(mapped, mapped.prev, r.pool);
    this.#tryMerge(mapped, mapped.next, r.pool);
    this.#segmentEvents.push({ reserved: true, address, bytes: mapBytes });
    return mapped;
  }

  /**
   * Maps `bytes` of pages at `address` of an expandable segment and counts them as reserved. The caller queues
   * `segmentReserved` (Note [Segment events]), once the segment is registered.
   */
  #mapPages(segment: Segment<H>, address: number, bytes: number): boolean {
    const offset = segment.memory.byteOffset + (address - segment.address);
    if (!this.backend.pageMapping!.map(segment.memory, offset, bytes)) return false;
    segment.mappedBytes += bytes;
    this.stats.reserved_bytes.add(segment.small, bytes);
    this.stats.num_device_alloc++;
    if (this.reservedBytes > this.#peakReservedBytes) this.#peakReservedBytes = this.reservedBytes;
    this.#history?.record('segment_map', address, bytes, segment.stream);
    return true;
  }

  /** Unmaps `bytes` of pages at `address` of an expandable segment and counts them; the caller emits. */
  #unmapPages(segment: Segment<H>, address: number, bytes: number): void {
    this.backend.pageMapping!.unmap(segment.memory, segment.memory.byteOffset + (address - segment.address), bytes);
    segment.mappedBytes -= bytes;
    this.stats.reserved_bytes.add(segment.small, -bytes);
    this.stats.num_device_free++;
    this.#history?.record('segment_unmap', address, bytes, segment.stream);
  }

  /** Splits `block` for the request when worth it, marks it allocated, counts it and wraps it in a DataPtr. */
  #allocateFound(block: Block<H>, r: Request<H>, nbytes: number): DataPtr<H> {
    const s = this.stats;
    const small = block.small;
    const alreadySplit = block.isSplit;
    const expandable = block.segment.expandable;
    if (this.#shouldSplit(block, r.size)) {
      // As in PyTorch, a new block takes the front; the remainder keeps its identity and stays in the pool.
      const front = new Block<H>(block.segment, block.address, r.size);
      front.prev = block.prev;
      if (front.prev) front.prev.next = front;
      else block.segment.head = front;
      front.next = block;
      block.prev = front;
      block.address += r.size;
      block.size -= r.size;
      r.pool.insert(block);
      if (!expandable) {
        if (alreadySplit) s.inactive_split_bytes.add(small, -r.size);
        else {
          s.inactive_split_bytes.add(small, block.size);
          s.inactive_split.add(small, 1);
        }
      }
      block = front;
    } else if (alreadySplit && !expandable) {
      s.inactive_split_bytes.add(small, -block.size);
      s.inactive_split.add(small, -1);
    }
    block.allocated = true;
    block.requestedSize = nbytes;
    s.countAllocated(small, block.size, nbytes);
    const live = s.allocatedBytes;
    if (live > this.#peakLiveBytes) this.#peakLiveBytes = live;
    if (block.size >= this.options.maxSplitSize) s.oversize_allocations.add(1);
    const ptr = new DataPtr<H>({
      device: this.device,
      byteLength: nbytes,
      handle: block.segment.memory.handle,
      byteOffset: block.handleOffset,
      address: block.address,
      context: block,
      deleter: this.deleter,
    });
    block.ptr = ptr;
    this.#history?.record('alloc', block.address, nbytes, block.stream);
    if (this.#segmentEvents.length > 0) this.#emitSegmentEvents();
    if (this.emitter.hears('allocated')) this.emitter.safeEmit('allocated', { ptr, requestedBytes: nbytes });
    return ptr;
  }

  /** Emits the queued segment events, in order (Note [Segment events]). */
  #emitSegmentEvents(): void {
    const events = this.#segmentEvents.splice(0);
    for (const { reserved, address, bytes } of events) this.emitter.safeEmit(reserved ? 'segmentReserved' : 'segmentReleased', { address, bytes });
  }

  #shouldSplit(block: Block<H>, size: number): boolean {
    const remaining = block.size - size;
    if (block.small || block.segment.expandable || this.options.unifiedPools) return remaining >= MIN_BLOCK_BYTES;
    return size < this.options.maxSplitSize && remaining > SMALL_REQUEST_MAX_BYTES;
  }

  // ---- free path ------------------------------------------------------------------------------------------

  /**
   * Note [Stream-ordered reuse]: a block used on other streams may still be read or written by work queued on
   * them. At free time the engine records an event on each such stream; the block returns to its pool (and may
   * merge) only when all of them have completed, checked at the start of each allocation and forced by
   * emptyCache. Until then it counts as active but not allocated ("active_pending_free").
   */
  #insertEvents(block: Block<H>, streams: Set<StreamId>): void {
    if (this.backend.deferredFree) streams.add(block.stream);
    block.streamUses = null;
    for (const stream of streams) this.#insertEvent(block, stream);
  }

  /** Records an event on `stream` that `block` waits for (the only one, for a deferred free used on its own stream). */
  #insertEvent(block: Block<H>, stream: StreamId): void {
    const event = this.backend.recordEvent(stream);
    block.eventCount++;
    let queue = this.#pendingEvents.get(stream);
    if (!queue) {
      this.#pendingEvents.set(stream, (queue = new EventQueue<H>()));
      this.#eventQueues.push(queue);
    }
    queue.push(event, block);
    this.#pendingCount++;
  }

  /** Completes, per stream in order, the events that have completed; stops at a stream's first incomplete one. */
  #processEvents(): void {
    const queues = this.#eventQueues;
    for (let i = 0; i < queues.length; i++) {
      const queue = queues[i]!;
      for (let event = queue.peek(); event !== undefined && this.backend.isEventComplete(event); event = queue.peek()) {
        const block = queue.shift();
        this.#pendingCount--;
        if (--block.eventCount === 0) this.#freeBlock(block);
      }
    }
  }

  #synchronizeEvents(): void {
    if (this.#pendingCount === 0) return;
    for (const queue of this.#eventQueues) {
      for (let event = queue.peek(); event !== undefined; event = queue.peek()) {
        this.backend.synchronizeEvent(event); // first: should it throw, the entry is still queued and counted
        const block = queue.shift();
        this.#pendingCount--;
        if (--block.eventCount === 0) this.#freeBlock(block);
      }
    }
  }

  /** A block's caller and streams are done with it: it becomes inactive, in a quick list or its pool. */
  #freeBlock(block: Block<H>): void {
    const s = this.stats;
    const small = block.small;
    const size = block.size;
    const requested = block.requestedSize;
    block.requestedSize = 0;
    s.countInactive(small, size, requested);
    if (block.segment.retired) {
      this.#history?.record('free_completed', block.address, requested, block.stream);
      this.#releaseIfIdle(block.segment); // never pooled again (Note [Retired segments])
      return;
    }
    if (s.allocatedBytes === 0) {
      // Nothing live (the last free, or a late one it waited for): merge what the quick lists held back too, so
      // the next step starts from whole free blocks (Note [Deferred coalescing]). The block first: until it is
      // in its pool it looks free to a neighbour merging into it.
      this.#coalesceIntoPool(block);
      this.#flushQuickLists();
    } else if (!this.#deferToQuickList(block)) this.#coalesceIntoPool(block);
    this.#history?.record('free_completed', block.address, requested, block.stream);
  }

  /** Inserts a free block into its pool after merging it with free pooled neighbours; counts inactive splits. */
  #coalesceIntoPool(block: Block<H>): void {
    const pool = this.#poolOf(block);
    let inactiveSplitBlocks = 0;
    let inactiveSplitBytes = 0;
    const before = this.#tryMerge(block, block.prev, pool);
    const after = this.#tryMerge(block, block.next, pool);
    if (before > 0) {
      inactiveSplitBlocks--;
      inactiveSplitBytes -= before;
    }
    if (after > 0) {
      inactiveSplitBlocks--;
      inactiveSplitBytes -= after;
    }
    pool.insert(block);
    if (block.isSplit) {
      inactiveSplitBlocks++;
      inactiveSplitBytes += block.size;
    }
    if ((inactiveSplitBlocks !== 0 || inactiveSplitBytes !== 0) && !block.segment.expandable) {
      this.stats.inactive_split.add(block.small, inactiveSplitBlocks);
      this.stats.inactive_split_bytes.add(block.small, inactiveSplitBytes);
    }
  }

  /**
   * Note [Deferred coalescing]: with `deferCoalescing` (the best preset), a freed block of at most 1 MiB (a
   * small-pool block, or a small one of unified pools) first goes to a short LIFO list of blocks of its exact (kind, stream, rounded size), unmerged, and the next request of that
   * size takes it in O(1) without touching the ordered pool: the common case of tensor programs that allocate
   * the same shapes every step. Large blocks always merge at once: measured on the PyTorch traces, deferring
   * them changes placement enough to raise peak reserved bytes by up to 9 %, while deferring small ones leaves
   * every trace's peak unchanged. Before the engine reserves memory, releases memory or answers that nothing fits,
   * it flushes every quick list into the pools (merging as usual), so deferral never makes the engine reserve a
   * segment that merging would have avoided, and when a free leaves nothing allocated (a static-shape loop then
   * starts each step from the same whole free blocks; #freeBlock). The lists are bounded (per size and in total bytes).
   */
  #deferToQuickList(block: Block<H>): boolean {
    if (!this.options.deferCoalescing || block.size > SMALL_REQUEST_MAX_BYTES) return false;
    const key = quickKey(block.segment.kind, block.stream, block.size);
    if (key < 0 || this.#quickBytes + block.size > this.reservedBytes / QUICK_SHARE_DIVISOR) return false;
    let list = this.#quick.get(key);
    if (!list) this.#quick.set(key, (list = []));
    if (list.length >= QUICK_LIST_MAX) return false;
    list.push(block);
    block.quick = true;
    this.#quickBytes += block.size;
    if (block.isSplit && !block.segment.expandable) {
      this.stats.inactive_split.add(block.small, 1);
      this.stats.inactive_split_bytes.add(block.small, block.size);
    }
    return true;
  }

  /** Moves every quick-listed block into its pool (Note [Deferred coalescing]); true when there were any. */
  #flushQuickLists(): boolean {
    if (this.#quickBytes === 0) return false;
    for (const list of this.#quick.values()) {
      for (const block of list) {
        block.quick = false;
        if (block.isSplit && !block.segment.expandable) {
          this.stats.inactive_split.add(block.small, -1);
          this.stats.inactive_split_bytes.add(block.small, -block.size);
        }
        this.#coalesceIntoPool(block);
      }
    }
    this.#quick.clear();
    this.#quickBytes = 0;
    return true;
  }

  /** Merges a free neighbour into `dst`; returns the bytes merged (0 when the neighbour is not free). */
  #tryMerge(dst: Block<H>, src: Block<H> | null, pool: BlockPool<H>): number {
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

  // ---- releasing cached memory ----------------------------------------------------------------------------

  /** Frees cached oversize blocks of the request's stream until one large enough went back. */
  #releaseAvailableCachedBlocks(r: Request<H>): boolean {
    const maxSplit = this.options.maxSplitSize;
    if (maxSplit === Number.MAX_SAFE_INTEGER) return false;
    const pool = r.pool;
    const wanted = Math.max(r.size, maxSplit);
    const fit = pool.lowerBound(r.stream, wanted);
    if (fit !== undefined) {
      if (fit.isSplit || fit.segment.expandable) return false;
      this.#releaseSegment(fit);
      return true;
    }
    // No single block is large enough: free oversize blocks from the largest down until enough went back.
    let released = 0;
    let block = pool.largest(r.stream);
    while (block !== undefined && released < wanted && block.size >= maxSplit) {
      const next = pool.lower(block);
      if (!block.isSplit && !block.segment.expandable) {
        released += block.size;
        this.#releaseSegment(block);
      }
      block = next;
    }
    return released >= wanted;
  }

  /** Frees every unsplit cached segment and the free tail pages of expandable ones; true (as PyTorch). */
  #releaseCachedBlocks(): boolean {
    this.#synchronizeEvents();
    this.#flushQuickLists();
    for (const pool of this.#allPools()) {
      for (const block of pool.blocks()) if (!block.isSplit && !block.segment.expandable) this.#releaseSegment(block);
    }
    for (const segment of [...this.#expandable.values()]) this.#unmapFreePages(segment);
    return true;
  }

  /**
   * Frees cached segments older than the average age, repeatedly, until reserved memory is under the
   * threshold's share of the limit (PyTorch's garbage_collection_threshold).
   */
  #garbageCollect(): void {
    const threshold = this.options.garbageCollectionThreshold * this.#allowedBytes;
    if (this.reservedBytes <= threshold) return;
    this.#flushQuickLists();
    const target = this.reservedBytes - threshold;
    const large = [...this.#pools.values()].map((p) => p[1]);
    const age = (b: Block<H>): number => this.#poolOf(b).searchCount - b.gcCountBase;
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
        this.#releaseSegment(block);
      }
      candidates = candidates.filter((b) => !old.includes(b));
    }
  }

  /** Returns an unsplit cached block's whole segment to the backend. */
  #releaseSegment(block: Block<H>): void {
    const segment = block.segment;
    this.#poolOf(block).remove(block);
    block.released = true;
    this.#segments.delete(segment);
    this.#returnToBackend(segment);
  }

  #returnToBackend(segment: Segment<H>): void {
    const bytes = segment.mappedBytes;
    if (segment.expandable) {
      // Unmap each run of mapped blocks at once: runs start and end on page boundaries, blocks need not. Each
      // unmap call is counted (reserved bytes, num_device_free, a trace entry) as #unmapPages counts it, and the
      // segment leaves the count with one segmentReleased for the bytes still mapped: none when emptyCache has
      // just unmapped every page (the release of the address range frees no device memory).
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
      this.backend.pageMapping!.release(segment.memory);
      segment.mappedBytes = 0;
      segment.extentBytes = 0;
      segment.gaps.clear();
      this.stats.segment.add(segment.small, -1);
      if (bytes > 0) this.#segmentEvents.push({ reserved: false, address: segment.address, bytes });
      return;
    }
    this.backend.free(segment.memory);
    this.#history?.record('segment_free', segment.address, bytes, segment.stream);
    segment.mappedBytes = 0;
    segment.extentBytes = 0;
    segment.gaps.clear();
    this.#countSegment(segment, bytes, -1);
  }

  /**
   * Unmaps the whole pages inside every free block of an expandable segment (Note [Expandable segments]),
   * drops a trailing gap, and returns the segment's address range when nothing is left in it.
   */
  #unmapFreePages(segment: Segment<H>): void {
    // Walk the segment's pool from the largest free block down to the page size: smaller blocks hold no whole
    // page, and what a sweep leaves behind is smaller than a page, so each sweep visits only blocks freed (or
    // merged) since the last one, never the live blocks.
    const pool = this.#poolsOf(segment.kind)[segment.small ? 0 : 1];
    const page = this.backend.pageMapping!.pageBytes;
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
      this.#segments.delete(segment);
      this.#expandable.delete(expandableKey(segment.kind, segment.stream, segment.small));
      this.#returnToBackend(segment);
    }
  }

  /**
   * Unmaps the whole pages inside a free pooled block: the partial pages at either end stay mapped as free
   * blocks, the middle becomes a gap. Returns the bytes unmapped.
   */
  #unmapInside(segment: Segment<H>, b: Block<H>): number {
    const page = this.backend.pageMapping!.pageBytes;
    const offset = b.address - segment.address;
    const start = Math.ceil(offset / page) * page;
    const end = Math.floor((offset + b.size) / page) * page;
    if (end <= start) return 0;
    const pool = this.#poolOf(b);
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
    this.#segmentEvents.push({ reserved: false, address, bytes }); // once the gap is in place
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

  #countSegment(segment: Segment<H>, bytes: number, sign: 1 | -1): void {
    const s = this.stats;
    s.segment.add(segment.small, sign);
    s.reserved_bytes.add(segment.small, sign * bytes);
    if (sign > 0) s.num_device_alloc++;
    else s.num_device_free++;
    if (bytes >= this.options.maxSplitSize) s.oversize_segments.add(sign); // fixed segments only (#returnToBackend)
    this.#segmentEvents.push({ reserved: sign > 0, address: segment.address, bytes });
  }

  // ---- snapshots ------------------------------------------------------------------------------------------

  /**
   * Adds a segment's snapshot entries to `out`: one for a segment, and for an expandable segment one per
   * contiguous mapped range, as PyTorch's snapshot lists them. Each entry's blocks tile exactly
   * `[address, address + total_size)`: an unmapped gap in the middle of an expandable segment ends one entry, and
   * the next mapped block starts another.
   */
  #snapshotSegment(segment: Segment<H>, out: SnapshotSegment[]): void {
    let run: Block<H>[] = [];
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) {
      if (b.mapped) run.push(b);
      else if (run.length > 0) {
        out.push(this.#snapshotRange(segment, run));
        run = [];
      }
    }
    if (run.length > 0) out.push(this.#snapshotRange(segment, run));
  }

  /** The snapshot entry of a mapped range of `segment`: its blocks, adjacent, in address order. */
  #snapshotRange(segment: Segment<H>, range: readonly Block<H>[]): SnapshotSegment {
    const blocks: SnapshotBlock[] = [];
    let total = 0;
    let allocated = 0;
    let active = 0;
    let requested = 0;
    for (const b of range) {
      const state = b.allocated ? 'active_allocated' : b.eventCount > 0 ? 'active_pending_free' : 'inactive';
      total += b.size;
      if (b.allocated) allocated += b.size;
      if (state !== 'inactive') active += b.size;
      requested += b.requestedSize;
      blocks.push({ address: b.address, size: b.size, requested_size: b.requestedSize, state, frames: [] });
    }
    return {
      device: this.device.index,
      address: range[0]!.address,
      total_size: total,
      allocated_size: allocated,
      active_size: active,
      requested_size: requested,
      stream: segment.stream,
      segment_type: segment.small ? 'small' : 'large',
      segment_pool_id: [0, 0],
      is_expandable: segment.expandable,
      frames: [],
      blocks,
    };
  }

  #settings(): Record<string, unknown> {
    const o = this.options;
    const divisions: Record<string, number> = {};
    for (let i = 0; i < ROUNDUP_INTERVALS; i++) divisions[String(2 ** i)] = o.roundupPower2Divisions[i] ?? 0;
    return {
      PYTORCH_CUDA_ALLOC_CONF: '',
      preset: o.preset,
      max_split_size: o.maxSplitSize === Number.MAX_SAFE_INTEGER ? -1 : o.maxSplitSize,
      garbage_collection_threshold: o.garbageCollectionThreshold,
      expandable_segments: o.expandableSegments && this.backend.pageMapping !== undefined,
      roundup_power2_divisions: divisions,
      memory_limit: Number.isFinite(this.#allowedBytes) ? this.#allowedBytes : -1,
    };
  }
}
