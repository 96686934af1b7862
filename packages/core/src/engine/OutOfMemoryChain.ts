/**
 * The out-of-memory chain: what the caching engine does when no cached block fits a request.
 *
 * - Garbage-collect old cached segments when over the threshold (SegmentRelease.ts).
 * - Ask the backend for a new segment, or for pages of an expandable segment (FixedSegments.ts,
 *   ExpandableSegments.ts).
 * - Free cached oversize blocks of the request's stream and retry; then free every unsplit cached segment, look
 *   in the cache again and retry.
 * - Under a budget, reserve a fixed segment of what the budget has left.
 * - Call each reclaimer (IPC, then LMS) while it frees something, looking in the cache and retrying after each.
 * - Only then count the failure, record it, emit `outOfMemory` and throw OutOfMemoryError.
 */
import type { AllocatorStats } from '../contracts/AllocatorStats.js';
import type { Device } from '../contracts/Device.js';
import type { StreamId } from '../contracts/MemoryBackend.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import type { SafeEmitter } from '../internal/SafeEmitter.js';
import type { Block } from './Block.js';
import type { EngineState, Request } from './EngineState.js';
import type { ExpandableSegments } from './ExpandableSegments.js';
import type { FixedSegments } from './FixedSegments.js';
import type { SegmentRelease } from './SegmentRelease.js';

/** Calls of one reclaimer per failed allocation at most (Note [Out-of-memory chain]). */
const MAX_RECLAIM_CALLS = 4096;

/** What the chain needs of the engine that owns it: its device, its emitter, and the calls back into it. */
export interface OutOfMemoryOwner<H> {
  readonly device: Device;
  /** The engine's private emitter, for `outOfMemory`. */
  readonly emitter: SafeEmitter;
  /** A cached block for the request, out of its quick list or pool (CachingAllocator#takeCached); else undefined. */
  takeCached(r: Request<H>): Block<H> | undefined;
  /** Emits the queued segment events (Note [Segment events] in CachingAllocator.ts). */
  emitSegmentEvents(): void;
  /** The engine's `memoryStats()`, for the event and the error. */
  memoryStats(): AllocatorStats;
}

/** Finds a block when the cache has none, or throws. Stateless beyond EngineState and the mechanisms it drives. */
export class OutOfMemoryChain<H> {
  constructor(
    private readonly state: EngineState<H>,
    private readonly fixed: FixedSegments<H>,
    private readonly expandable: ExpandableSegments<H>,
    private readonly release: SegmentRelease<H>,
    private readonly owner: OutOfMemoryOwner<H>,
  ) {}

  /**
   * Note [Out-of-memory chain]: no cached block fits. In order: garbage-collect (with a threshold), reserve a
   * new segment, release cached oversize blocks and retry, release every unsplit cached segment and retry,
   * then each reclaimer in turn (IPC collect, LMS reclaim) followed by a retry, and only then throw. Each step
   * runs only when the previous one failed, so a device with room never loses its cache. A retry after a
   * reclaimer looks in the quick lists as well as the pools (takeCached), so a block of exactly the request's
   * size that the reclaimer freed serves it before any cached segment is released.
   * @throws OutOfMemoryError when every step failed
   */
  reserveBlock(r: Request<H>, nbytes: number): Block<H> {
    const release = this.release;
    const owner = this.owner;
    if (this.state.options.garbageCollectionThreshold > 0) release.garbageCollect();
    let block =
      this.#newSegmentBlock(r, false) ??
      (release.releaseAvailableCachedBlocks(r) ? this.#newSegmentBlock(r, false) : undefined) ??
      // Releasing the cache completes pending frees and merges quick lists: a block may fit now.
      (release.releaseCachedBlocks() ? (owner.takeCached(r) ?? this.#newSegmentBlock(r, true)) : undefined) ??
      this.#segmentInRoom(r);
    if (block) return block;
    const target = { small: r.pool.small, kind: r.kind, stream: r.stream };
    for (const reclaimer of this.state.options.reclaimers()) {
      // A reclaimer may free a little at a time (LMS: one storage, then fragments, then everything inactive), so
      // it is asked again while it says it freed something. Not while allocated bytes go down: a listener of the
      // reclaimer may itself allocate what was freed. The bound only stops a reclaimer that always says it freed.
      for (let asked = 0; asked < MAX_RECLAIM_CALLS && reclaimer.reclaim(owner.device, r.size, target) > 0; asked++) {
        // What it freed is in this engine's cache: merge it with its free neighbours and look there, then release
        // the cache and retry.
        release.settleFrees();
        block = owner.takeCached(r) ?? (release.releaseCachedBlocks() ? (owner.takeCached(r) ?? this.#newSegmentBlock(r, true)) : undefined) ?? this.#segmentInRoom(r);
        if (block) return block;
      }
    }
    return this.#throwOutOfMemory(nbytes, r.stream);
  }

  /** Counts, records and reports the failed request of `nbytes` on `stream`, then throws OutOfMemoryError. */
  #throwOutOfMemory(nbytes: number, stream: StreamId): never {
    const state = this.state;
    const owner = this.owner;
    owner.emitSegmentEvents(); // what the chain released goes out first: listeners then see whole state
    state.stats.num_ooms++;
    const deviceFreeBytes = this.#deviceFreeBytes();
    const free = deviceFreeBytes ?? (state.capacityBytes === undefined ? undefined : Math.max(0, state.capacityBytes - state.reservedBytes));
    state.history?.record('oom', 0, nbytes, stream, null, free === undefined ? undefined : { device_free: free });
    const stats = owner.memoryStats();
    owner.emitter.safeEmit('outOfMemory', { requestedBytes: nbytes, stats });
    const hint = state.backend.outOfMemoryHint?.(nbytes);
    const budgetBytes = Number.isFinite(state.allowedBytes) ? state.allowedBytes : undefined;
    throw new OutOfMemoryError({ device: owner.device, requestedBytes: nbytes, capacityBytes: state.capacityBytes, budgetBytes, deviceFreeBytes, stats, ...(hint === undefined ? {} : { hint }) });
  }

  /** The device's free bytes as its driver reports them, when the backend can say (a failing query says nothing). */
  #deviceFreeBytes(): number | undefined {
    try {
      return this.state.backend.memoryInfo?.().freeBytes;
    } catch {
      return undefined;
    }
  }

  /** Asks the backend for a new segment (or expandable pages) for `r`; undefined when it has no room. */
  #newSegmentBlock(r: Request<H>, isRetry: boolean): Block<H> | undefined {
    if (isRetry) this.state.stats.num_alloc_retries++;
    if (this.state.options.expandableSegments && this.state.backend.pageMapping) return this.expandable.grow(r);
    return this.fixed.reserve(r);
  }

  /**
   * The last resort before the reclaimers: a fixed segment of what the budget has left (Note [Segments under a
   * budget] in FixedSegments.ts).
   */
  #segmentInRoom(r: Request<H>): Block<H> | undefined {
    return this.state.options.expandableSegments && this.state.backend.pageMapping ? undefined : this.fixed.reserveInRoom(r);
  }
}
