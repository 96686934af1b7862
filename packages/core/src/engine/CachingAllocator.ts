/**
 * The caching engine after PyTorch's CUDA caching allocator, over any MemoryBackend. This file holds the public
 * API and the hot path of allocate and free; each other mechanism has a file (packages/core/README.md lists them).
 *
 * - Requests round up to 512 bytes (or power-of-two divisions); up to 1 MiB they come from the small pool,
 *   backed by 2 MiB segments; larger ones from the large pool, backed by 20 MiB segments (under 10 MiB) or
 *   segments of their own size rounded to 2 MiB (SizeClass.ts, FixedSegments.ts).
 * - A request takes a block of exactly its size from a quick list (QuickLists.ts), else the best-fitting free
 *   block of its pool and stream, ordered by (size, address) (BlockPool.ts), and splits it when the remainder is
 *   worth keeping (small pool: >= 512 B; large pool: > 1 MiB and the request is under the max split size).
 *   Blocks of at least the max split size serve only requests near their size.
 * - A free block merges with free neighbours in its segment at once (small ones may wait in a quick list), so
 *   free space never fragments further than allocations force it to.
 * - Blocks belong to the stream that allocated them. A block used on other streams (`recordStream`) returns to
 *   the pool only once events recorded on those streams at free time have completed (Note [Stream-ordered
 *   reuse] in StreamEvents.ts).
 * - When no block fits: garbage-collect old cached segments if over the threshold, ask the backend for a new
 *   segment, then free cached oversize blocks and retry, then free every unsplit cached segment and retry, then
 *   call the reclaimers (IPC, then LMS), and only then throw OutOfMemoryError (OutOfMemoryChain.ts; releasing:
 *   SegmentRelease.ts).
 * - With expandable segments, each (kind, stream, pool) grows one segment by mapping pages instead of reserving
 *   new fixed segments; free pages are unmapped by emptyCache, trim and the chain (ExpandableSegments.ts).
 * - Statistics use PyTorch's names and meanings; `snapshot()` uses PyTorch's snapshot schema (EngineSnapshot.ts).
 */
import type { AllocateOptions } from '../contracts/Allocator.js';
import { DataPtr } from '../storage/DataPtr.js';
import { formatDevice } from '../contracts/Device.js';
import type { DeviceError } from '../errors/DeviceError.js';
import { ForeignPointerError } from '../errors/ForeignPointerError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import { AllocatorBase } from '../internal/AllocatorBase.js';
import { checkAllocateOptions, checkByteCount } from '../validation/validate.js';
import type { MemoryBackend, StreamId } from '../contracts/MemoryBackend.js';
import type { MemorySnapshot, SnapshotFrame } from '../contracts/MemorySnapshot.js';
import { Block, placementOf } from './Block.js';
import type { BlockPlacement } from '../contracts/BlockPlacement.js';
import { contextUnder, NOT_UNDER } from '../internal/allocatorDeleters.js';
import type { BlockInspector } from '../contracts/BlockInspector.js';
import type { CachingAllocatorOptions, ResolvedCachingOptions } from './CachingAllocatorOptions.js';
import { resolveCachingOptions } from './CachingAllocatorOptions.js';
import { EngineInvariants } from './EngineInvariants.js';
import { EngineSnapshot } from './EngineSnapshot.js';
import type { Request } from './EngineState.js';
import { EngineState, maySplitFor, shouldSplit, tryMerge } from './EngineState.js';
import { ExpandableSegments } from './ExpandableSegments.js';
import { FixedSegments } from './FixedSegments.js';
import type { HistoryOptions } from './History.js';
import { History } from './History.js';
import { OutOfMemoryChain } from './OutOfMemoryChain.js';
import { QuickLists, quickKey } from './QuickLists.js';
import { SegmentRelease } from './SegmentRelease.js';
import { isSmallRequest, roundSize } from './SizeClass.js';
import { checkBackend } from './checkEngineInputs.js';
import { StreamEvents } from './StreamEvents.js';

/** The options of a call that passed none: one shared object, not a new one per call. */
const NO_OPTIONS: AllocateOptions = Object.freeze({});

/** The context of a zero-byte pointer: no block, nothing to free but the count. */
const ZERO_BYTES = Symbol('zero-byte allocation');

/**
 * A caching allocator over any MemoryBackend. See the file header for the algorithm.
 *
 * Invariants (checked by `assertInvariants()`, EngineInvariants.ts):
 * - the blocks of every segment tile it exactly: head.address == segment address, each next starts where its
 *   prev ends, and the sizes add up to the segment's mapped bytes;
 * - every free block is in its pool or a quick list; no two pooled free blocks are neighbours (they merge);
 * - reserved_bytes == sum of mapped segment bytes; allocated_bytes == sum of allocated block sizes;
 *   active_bytes == allocated + pending-free block sizes; requested_bytes == requested sizes of the same blocks
 *   (as in PyTorch, a block leaves requested_bytes when it leaves active_bytes).
 */
export class CachingAllocator<H = unknown> extends AllocatorBase<H> implements BlockInspector {
  readonly backend: MemoryBackend<H>;
  readonly options: ResolvedCachingOptions;
  /** Pools, segments, statistics, backend and options, shared with the mechanisms below. */
  readonly #state: EngineState<H>;
  readonly #quick: QuickLists<H>;
  readonly #events: StreamEvents<H>;
  /** Frees whose events completed, for `freeCompleted`, emitted with the segment events (Note [Segment events]). */
  readonly #completedFrees: { address: number; requestedBytes: number }[] = [];
  readonly #fixed: FixedSegments<H>;
  readonly #expandable: ExpandableSegments<H>;
  readonly #release: SegmentRelease<H>;
  readonly #outOfMemory: OutOfMemoryChain<H>;
  readonly #snapshot: EngineSnapshot<H>;
  readonly #invariants: EngineInvariants<H>;

  /** @throws InvalidArgumentError when `backend` is not a MemoryBackend, or for bad options */
  constructor(backend: MemoryBackend<H>, options: CachingAllocatorOptions = {}) {
    super(checkBackend(backend).device, backend.alignment, backend);
    this.backend = backend;
    this.options = resolveCachingOptions(options);
    const limit = this.options.memoryLimit;
    let allowedBytes: number;
    if (limit === undefined) allowedBytes = Number.POSITIVE_INFINITY;
    else if (typeof limit === 'number') allowedBytes = limit;
    else if (backend.capacityBytes !== undefined) allowedBytes = Math.floor(limit.fraction * backend.capacityBytes);
    else throw new InvalidArgumentError('options.memoryLimit', limit, `bytes: ${formatDevice(backend.device)} does not report its capacity`);
    this.stats.max_split_size = this.options.maxSplitSize === Number.MAX_SAFE_INTEGER ? -1 : this.options.maxSplitSize;
    const state = (this.#state = new EngineState<H>(backend, this.options, this.stats, allowedBytes));
    this.#quick = new QuickLists<H>(this.options, this.stats, (block) => this.#coalesceIntoPool(block));
    this.#events = new StreamEvents<H>(backend, (block) => {
      if (this.emitter.hears('freeCompleted')) this.#completedFrees.push({ address: block.address, requestedBytes: block.requestedSize });
      this.#freeBlock(block, block.frames);
    });
    this.#fixed = new FixedSegments<H>(state);
    this.#expandable = new ExpandableSegments<H>(state, (r) => this.#takeCached(r));
    this.#release = new SegmentRelease<H>(state, this.#events, this.#quick, this.#fixed, this.#expandable);
    this.#outOfMemory = new OutOfMemoryChain<H>(state, this.#fixed, this.#expandable, this.#release, {
      device: this.device,
      emitter: this.emitter,
      takeCached: (r) => this.#takeCached(r),
      emitSegmentEvents: () => this.#emitSegmentEvents(),
      memoryStats: () => this.memoryStats(),
    });
    this.#snapshot = new EngineSnapshot<H>(state);
    this.#invariants = new EngineInvariants<H>(state, this.#quick, this.#expandable);
  }

  /** Bytes the engine may reserve: the memory limit, else the backend's capacity (undefined when unknown). */
  get capacityBytes(): number | undefined {
    return this.#state.capacityBytes;
  }

  /** Bytes reserved from the backend right now. */
  get reservedBytes(): number {
    return this.stats.reservedBytes;
  }

  allocate(nbytes: number, options: AllocateOptions = NO_OPTIONS): DataPtr<H> {
    this.checkOpen('allocate');
    checkByteCount('nbytes', nbytes);
    if (options !== NO_OPTIONS) checkAllocateOptions(options);
    const stream = options.stream ?? this.backend.defaultStream;
    if (!this.backend.isStream(stream)) throw new InvalidArgumentError('options.stream', stream, `a stream of ${formatDevice(this.device)}`);
    if (nbytes === 0) {
      this.backend.segmentKind?.(options); // a zero-byte request is refused what a real one would be
      return this.#allocateZero();
    }
    const events = this.#events;
    if (events.pendingCount > 0) events.process();
    const size = roundSize(nbytes, this.options.roundupPower2Divisions);
    const small = !this.options.unifiedPools && isSmallRequest(size);
    // Note [Segment kinds]: a backend may hold segments that are not interchangeable (host memory that is shared
    // or not; WebGPU buffers of different usages). `segmentKind(options)` names the kind a request needs; each
    // kind has its own pools and expandable segments, and a block never serves a request of another kind.
    const kind = this.backend.segmentKind?.(options) ?? 0;
    const request: Request<H> = { stream, kind, size, pool: this.#state.poolsOf(kind)[small ? 0 : 1] };
    let block: Block<H>;
    try {
      block = this.#takeCached(request) ?? (this.#quick.flush() ? this.#takeCached(request) : undefined) ?? this.#outOfMemory.reserveBlock(request, nbytes);
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
    // Not checkPtr's `owned`, whose holder test is free's: a live storage's pointer is the usual one to record a
    // stream on (PyTorch's `tensor.record_stream`; LMS's page-out of a storage's block).
    this.checkPtr('ptr', ptr);
    const block = contextUnder(ptr, this.deleter) as Block<H> | typeof ZERO_BYTES | typeof NOT_UNDER;
    if (block === NOT_UNDER) {
      throw new ForeignPointerError(`Cannot record a stream on the allocation at 0x${ptr.address.toString(16)}: this ${formatDevice(this.device)} allocator did not allocate it, or COW/IPC now owns it.`);
    }
    if (!this.backend.isStream(stream)) throw new InvalidArgumentError('stream', stream, `a stream of ${formatDevice(this.device)}`);
    if (block === ZERO_BYTES || stream === block.stream) return;
    (block.streamUses ??= new Set()).add(stream);
  }

  /** Frees cached blocks: every unsplit free segment, and the free pages of expandable segments. */
  emptyCache(): void {
    this.checkOpen('emptyCache');
    this.#release.releaseCachedBlocks();
    this.#emitSegmentEvents();
  }

  /**
   * Releases cached segments, largest first, until reserved bytes are at most `targetBytes` or nothing cached is
   * left. Returns the reserved bytes afterwards.
   */
  trim(targetBytes: number): number {
    this.checkOpen('trim');
    checkByteCount('targetBytes', targetBytes);
    this.#release.trim(targetBytes);
    this.#emitSegmentEvents();
    return this.reservedBytes;
  }

  /** Starts (or, with `false`, stops) recording a bounded trace of events, returned by `snapshot()`. */
  recordHistory(options: HistoryOptions | false = {}): void {
    if (options === false) {
      this.#state.history = null;
      return;
    }
    this.#state.history = new History(options);
  }

  snapshot(): MemorySnapshot {
    this.checkOpen('snapshot');
    return this.#snapshot.take();
  }

  /**
   * The live pointers whose memory lies in the backend segment with handle `handle`, in address order within each
   * segment (for failure reports: the pointers a device error on that segment touches). Empty for an unknown handle.
   */
  livePointersIn(handle: H): DataPtr<H>[] {
    const ptrs: DataPtr<H>[] = [];
    for (const segment of this.#state.segments) {
      if (segment.memory.handle !== handle) continue;
      for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) if (b.allocated && b.ptr) ptrs.push(b.ptr);
    }
    return ptrs;
  }

  /** Every live pointer of this engine, segment by segment (for failure reports). */
  livePointers(): DataPtr<H>[] {
    return [...this.#state.segments].flatMap((segment) => this.livePointersIn(segment.memory.handle));
  }

  /**
   * Where a live pointer of this engine sits (the engine is its device's BlockInspector service), also through
   * the adaptors that took over its deleter; undefined for any other pointer.
   */
  describeBlock(ptr: DataPtr): BlockPlacement | undefined {
    if (this.isDisposed || !(ptr instanceof DataPtr) || ptr.isReleased) return undefined;
    const block = contextUnder(ptr, this.deleter);
    if (block === NOT_UNDER || block === ZERO_BYTES) return undefined;
    return placementOf(block as Block<H>);
  }

  /**
   * Reports that the device failed under live allocations (a rejected segment, a lost device): emits
   * `deviceError` with `ptrs`, the pointers whose memory is gone. For a device's services beside the engine;
   * changes nothing in the engine (retire the segment with `retireSegment`). No-op after dispose.
   */
  reportDeviceError(error: DeviceError, ptrs: readonly DataPtr[]): void {
    if (!this.isDisposed) this.emitter.safeEmit('deviceError', { error, ptrs });
  }

  /**
   * Checks every invariant listed on the class against a full recount, throwing an Error that names the first
   * one broken. For tests; O(blocks).
   */
  assertInvariants(): void {
    this.#invariants.check();
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
    this.#state.history?.record('free_requested', block.address, block.requestedSize, block.stream);
    let pending = true;
    if (block.streamUses !== null && block.streamUses.size > 0) this.#events.insertEvents(block, block.streamUses);
    else if (this.backend.deferredFree) this.#events.insertEvent(block, block.stream);
    else {
      this.#freeBlock(block);
      pending = false;
    }
    if (this.emitter.hears('freed')) this.emitter.safeEmit('freed', { ptr, pending });
    if (this.#state.segmentEvents.length > 0 || this.#completedFrees.length > 0) this.#emitSegmentEvents(); // a retired segment went back
  }

  /**
   * Note [Retired segments]: a backend may learn only later that a segment is unusable (WebGPU reports a
   * buffer the device rejected asynchronously, after blocks of it were handed out). Retiring it takes it out of
   * service: its free blocks leave the pools and quick lists, a block freed later is not pooled again, and the
   * segment goes back to the backend once nothing in it is allocated or waiting on an event
   * (SegmentRelease#releaseIfIdle). Returns whether a segment had that handle.
   */
  retireSegment(handle: H): boolean {
    const found = this.#release.retire(handle);
    this.#emitSegmentEvents();
    return found;
  }

  protected disposeResources(): void {
    const state = this.#state;
    for (const segment of state.segments) {
      for (let b: Block<H> | null = segment.head; b; b = b.next) b.released = true;
      this.#release.returnToBackend(segment);
    }
    state.segments.clear();
    this.#expandable.clear();
    this.#events.clear();
    this.#quick.clear();
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
   * list holds (Note [Deferred coalescing] in QuickLists.ts), else the best fit in its pool and stream, honouring
   * the max split size. Undefined when none.
   *
   * Note [Few large functions on the hot path]: Node 20's V8 optimizes a function after it has run a number of
   * 66 KB budgets of its own bytecode: three, plus one per 150 bytes of its length (`--trace-opt-verbose`).
   * - A short function called once per operation therefore needs 2,000–3,500 calls, more than the first pass of
   *   most traces, so a second pass (a training program's second step) would run partly unoptimized.
   * - Code that never runs on the hot path (building error messages) lengthens a function without spending its
   *   budget, so it lives in functions of its own (AllocatorBase's checkPtr).
   * - The hot path is a few longer functions, in this file but for two: the quick list and the pool search here
   *   (the quick list read inline, not through a QuickLists method), the split in #allocateFound, the caller's
   *   free in releaseAllocation and #freeBlock; QuickLists#defer (a freed small block) and StreamEvents#process
   *   (event completion). The other mechanisms run only when the cache misses, releases or is inspected.
   */
  #takeCached(r: Request<H>): Block<H> | undefined {
    const quickLists = this.#quick;
    if (quickLists.bytes > 0) {
      const quick = quickLists.lists.get(quickKey(r.kind, r.stream, r.size))?.pop();
      if (quick !== undefined) {
        quick.quick = false;
        quickLists.bytes -= quick.size;
        return quick;
      }
    }
    const pool = r.pool;
    if (this.options.garbageCollectionThreshold > 0) pool.searchCount++;
    let block = pool.lowerBound(r.stream, r.size);
    if (block === undefined) return undefined;
    // Note [Best fit next to unmapped space]: PyTorch's rule for segments that unmap only under pressure.
    if (block.segment.expandable && this.options.fragmentationLimit === Number.POSITIVE_INFINITY) block = this.#expandable.bestFit(pool, block, r.size);
    if (!maySplitFor(block.size, r.size, this.options.maxSplitSize)) return undefined;
    if (!this.options.splitBlocks && !block.segment.expandable && shouldSplit(block, r.size, this.options)) return undefined;
    pool.remove(block);
    return block;
  }

  /** Splits `block` for the request when worth it, marks it allocated, counts it and wraps it in a DataPtr. */
  #allocateFound(block: Block<H>, r: Request<H>, nbytes: number): DataPtr<H> {
    const s = this.stats;
    const small = block.small;
    const alreadySplit = block.isSplit;
    const expandable = block.segment.expandable;
    if ((expandable || this.options.splitBlocks) && shouldSplit(block, r.size, this.options)) {
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
    const state = this.#state;
    const live = s.allocatedBytes;
    if (live > state.peakLiveBytes) state.peakLiveBytes = live;
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
    const history = state.history;
    if (history !== null) {
      const frames = history.record('alloc', block.address, nbytes, block.stream);
      if (history.stacks) block.frames = frames;
    }
    if (state.segmentEvents.length > 0 || this.#completedFrees.length > 0) this.#emitSegmentEvents();
    if (this.emitter.hears('allocated')) this.emitter.safeEmit('allocated', { ptr, requestedBytes: nbytes });
    return ptr;
  }

  /**
   * Emits the queued segment events, in order.
   *
   * Note [Segment events]: `segmentReserved` and `segmentReleased` are queued (EngineState#segmentEvents) while
   * the engine works and emitted here once its state is whole: after the request that reserved memory has its
   * block (until then the new block is free but outside the pool, and a listener that allocates must not be
   * handed it), and after a sweep or release loop has finished (a listener that allocates or frees mid-loop
   * would change the blocks and segments the loop is walking).
   */
  #emitSegmentEvents(): void {
    // The frees whose events completed meanwhile (`freeCompleted`) first, queued for the same reason.
    for (const completed of this.#completedFrees.splice(0)) this.emitter.safeEmit('freeCompleted', completed);
    const events = this.#state.segmentEvents.splice(0);
    for (const { reserved, address, bytes } of events) this.emitter.safeEmit(reserved ? 'segmentReserved' : 'segmentReleased', { address, bytes });
  }

  // ---- free path ------------------------------------------------------------------------------------------

  /**
   * A block's caller and streams are done with it: it becomes inactive, in a quick list or its pool. `frames`:
   * the free_completed entry's frames when the free is not the caller's (events completed later), as PyTorch
   * records the allocation's there.
   *
   * Note [History names the block]: as PyTorch's, every `free_requested` and `free_completed` entry names the freed
   * block's own address and the size its `alloc` entry named, recorded before the block merges with free
   * neighbours (a merge moves a block's address to its free neighbour's). A reader pairs each free with its alloc
   * by address: PyTorch's viewer, `toTraceEvents` and any replay of the history.
   */
  #freeBlock(block: Block<H>, frames?: SnapshotFrame[] | null): void {
    const s = this.stats;
    const small = block.small;
    const size = block.size;
    const requested = block.requestedSize;
    this.#state.history?.record('free_completed', block.address, requested, block.stream, frames);
    block.requestedSize = 0;
    block.frames = null;
    s.countInactive(small, size, requested);
    if (block.segment.retired) {
      this.#release.releaseIfIdle(block.segment); // never pooled again (Note [Retired segments])
      return;
    }
    if (s.allocatedBytes === 0) {
      // Nothing live (the last free, or a late one it waited for): merge what the quick lists held back too, so
      // the next step starts from whole free blocks (Note [Deferred coalescing] in QuickLists.ts). The block
      // first: until it is in its pool it looks free to a neighbour merging into it.
      this.#coalesceIntoPool(block);
      this.#quick.flush();
    } else if (!this.#quick.defer(block)) this.#coalesceIntoPool(block);
  }

  /** Inserts a free block into its pool after merging it with free pooled neighbours; counts inactive splits. */
  #coalesceIntoPool(block: Block<H>): void {
    const pool = this.#state.poolOf(block);
    let inactiveSplitBlocks = 0;
    let inactiveSplitBytes = 0;
    const before = tryMerge(block, block.prev, pool);
    const after = tryMerge(block, block.next, pool);
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
}
