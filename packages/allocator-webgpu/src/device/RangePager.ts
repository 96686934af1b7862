import type { AllocateOptions, DataPtr } from '@stowage/core';
import { isOutOfMemoryError } from '@stowage/core';
import type { WebGpuBuffers } from '../WebGpuBuffers.js';

/**
 * A StowageBuffer's range (SubAllocatingDevice) as the pager moves it: resident (a pointer of the device's
 * allocator, at `segment` and `offset`) or paged out (its bytes in `host` only, `ptr` undefined).
 */
export interface Range {
  /** The allocator's pointer while resident; undefined while paged out. */
  ptr: DataPtr<GPUBuffer> | undefined;
  /** Where the range lies while resident (stale while paged out). */
  segment: GPUBuffer;
  offset: number;
  /** The size the program asked for. */
  readonly size: number;
  /** The bytes a clear, a host copy or a page-in covers: `size` rounded up to 4. */
  readonly clearBytes: number;
  /** A range of a uniform segment: a uniform buffer or an upload (Note [Uniform ranges]); it pages back into one. */
  readonly uniform: boolean;
  /** Named by a command, bind group or write since it was made (Note [Uploads written where they go]). */
  used: boolean;
  destroyed: boolean;
  /** Moves so far: a bind group made before a move binds the old place (Note [Bind groups after a move]). */
  generation: number;
  /** Possible writes so far (uses that may change the bytes): a host copy of an older version is stale. */
  version: number;
  /** The pager's clock at the last use: the least recently used clean ranges are paged out first. */
  lastUse: number;
  /** The bytes of `version` on the host once a host copy landed (Note [Paging between runs]); else undefined. */
  host: Uint8Array | undefined;
  /** The version a host copy in flight copies; -1 when none is. */
  copying: number;
}

/** A new range resident at `ptr` (`segment`, `offset`), with no host copy yet. */
export function residentRange(ptr: DataPtr<GPUBuffer>, segment: GPUBuffer, offset: number, size: number, clearBytes: number, uniform: boolean, used: boolean): Range {
  return { ptr, segment, offset, size, clearBytes, uniform, used, destroyed: false, generation: 0, version: 0, lastUse: 0, host: undefined, copying: -1 };
}

/** The ranges one open command encoder (or one bind group being made) names: never paged out until its submit. */
export interface UseSet {
  readonly ranges: Set<Range>;
  /** Set at the submit of the encoder's command buffer (or when the bind group is made). */
  closed: boolean;
}

/**
 * Note [Paging between runs] (issue 36, several sessions under one budget): several programs (two ORT sessions, say)
 * on one Stowage device need, without paging, the sum of their peaks; with paging, about the larger one. The device
 * pages its ranges itself, below LMS (a device plugin may not import @stowage/lms, which sits a layer above it, and
 * LMS pages storages, not the program's GPUBuffers):
 * - Host copies are made at an idle point the program awaits anyway: `settleStowageDevice(device)` between runs
 *   (or between session creations). It copies every resident range whose bytes may have changed since its last
 *   host copy, and is named by no open encoder, into MAP_READ staging (the pager's `pageOutRead`, inside the
 *   budget's paging reserve), and keeps the bytes on the host once mapped. Such a range is then clean: its device
 *   bytes equal its host bytes. Nothing is freed there.
 * - Every allocation of the device (a program's createBuffer, a page-in, scratch) that the budget refuses
 *   (OutOfMemoryError after the engine's own chain) pages out clean ranges, least recently used first, and retries:
 *   paging out a clean range only frees its pointer, synchronously. The allocation fails only when no clean range
 *   is left that no open encoder names.
 * - A range is used (page-in first, when paged out) where the device translates it: a bind group's creation and
 *   its `setBindGroup` (Note [Bind groups after a move]), an encoder's copies, clears, query resolves and indirect
 *   dispatches, `queue.writeBuffer`. A page-in allocates a new range and writes the host bytes with
 *   `queue.writeBuffer`, which runs before any command buffer submitted later; a write of the whole range skips them.
 *   Every storage binding is writable on this device (Note [Storage bindings are all writable]), so a bound range
 *   counts as written: its host copy is dropped, and the next settle copies it again.
 * - Safety: a range named by an open encoder (recorded, not yet submitted) is neither copied nor paged out, so an
 *   encoder never runs on a place another range took. A clean range's host copy was recorded after its last write,
 *   and it landed, so every submit that wrote it completed; its place is freed as submitted (`freeingSubmitted`),
 *   and any later use of the place is ordered after those submits by the queue.
 * Without `settleStowageDevice` nothing is ever clean: the device behaves as without paging.
 */
/**
 * Invariants: #clean ⊆ {r ∈ #live | r.ptr defined, r.host defined}; a range with r.host defined holds the bytes of
 * version r.version; a range with r.ptr undefined is in #live only with r.host defined (paged out).
 */
export class RangePager {
  /** Host copies made, pages out and in, bind groups made again after a move; bytes copied each way. */
  readonly counts = { hostCopies: 0, hostCopyBytes: 0, pagedOut: 0, pagedOutBytes: 0, pagedIn: 0, pagedInBytes: 0, rebuiltBindGroups: 0, settles: 0 };
  /** Every live range (resident or not). */
  readonly #live = new Set<Range>();
  /** Resident ranges whose landed host copy is of their current version: the candidates to page out. */
  readonly #clean = new Set<Range>();
  /** Use sets of open encoders, weakly: an encoder dropped unsubmitted stops protecting its ranges when collected. */
  readonly #open = new Set<WeakRef<UseSet>>();
  #clock = 0;

  /**
   * @param enabled whether `settle` makes host copies (otherwise nothing is ever paged out)
   * @param flushClears submits the device's pending clears (a host copy must see them)
   */
  constructor(
    private readonly buffers: WebGpuBuffers,
    private readonly queue: GPUQueue,
    readonly enabled: boolean,
    private readonly flushClears: () => void,
  ) {
    if (enabled) buffers.backend.pager.enablePaging();
  }

  /** Starts tracking a new resident range. */
  track(range: Range): void {
    this.#live.add(range);
    range.lastUse = ++this.#clock;
  }

  /** Stops tracking a destroyed or collected range; returns its pointer if it is resident (the caller frees it). */
  forget(range: Range): DataPtr<GPUBuffer> | undefined {
    this.#live.delete(range);
    this.#clean.delete(range);
    range.host = undefined;
    return range.ptr;
  }

  /** A new use set, protecting its ranges until `close`. */
  open(): UseSet {
    const set: UseSet = { ranges: new Set(), closed: false };
    if (this.enabled) this.#open.add(new WeakRef(set));
    return set;
  }

  close(set: UseSet): void {
    set.closed = true;
  }

  /**
   * Makes `range` resident (paging it in) and notes its use by `set`; `writes` drops its host copy.
   * `wholeWrite`: the caller overwrites every byte, so a page-in skips the host bytes.
   * @throws OutOfMemoryError when no room is left for a page-in after paging out every clean range it may
   */
  use(range: Range, set: UseSet | undefined, writes: boolean, wholeWrite = false): void {
    if (!this.enabled || range.destroyed) return;
    set?.ranges.add(range);
    range.lastUse = ++this.#clock;
    if (range.ptr === undefined) this.#pageIn(range, wholeWrite);
    if (writes) {
      range.version++;
      range.host = undefined;
      this.#clean.delete(range);
    }
  }

  /**
   * Allocates through the device's allocator; when the budget refuses, pages out clean ranges (least recently used
   * first) and retries (Note [Paging between runs]).
   * @throws OutOfMemoryError when the allocation fails with no clean range left to page out
   */
  allocate(bytes: number, options?: AllocateOptions): DataPtr<GPUBuffer> {
    for (;;) {
      try {
        return this.buffers.allocate(bytes, options);
      } catch (error) {
        if (!this.enabled || !isOutOfMemoryError(error) || this.#pageOut(bytes) === 0) throw error;
      }
    }
  }

  /**
   * Makes a host copy of every resident range whose bytes changed since its last one and that no open encoder names
   * (Note [Paging between runs]), least recently used first; resolves once they landed. Copies wait for room in the
   * budget's paging reserve: those in flight land first.
   */
  async settle(): Promise<void> {
    if (!this.enabled) return;
    this.counts.settles++;
    this.flushClears();
    this.#pruneOpen();
    const copyable = (r: Range): boolean => r.ptr !== undefined && !r.destroyed && r.host === undefined && r.copying !== r.version && !this.#isOpen(r);
    const dirty = [...this.#live].filter(copyable).sort((a, b) => a.lastUse - b.lastUse);
    // Pieces of at most half the paging reserve, so that two are in flight while the segments fill their share.
    const reserve = this.buffers.backend.budget.pagingReserveBytes;
    const pieceBytes = reserve > 0 ? Math.max(256, Math.floor(reserve / 2 / 4) * 4) : Number.POSITIVE_INFINITY;
    const inFlight: Promise<unknown>[] = [];
    const landed: Promise<void>[] = [];
    let room = true;
    for (const range of dirty) {
      if (!room) break;
      if (!copyable(range)) continue;
      const version = range.version;
      range.copying = version;
      const bytes = new Uint8Array(range.clearBytes);
      const pieces: Promise<void>[] = [];
      let complete = true;
      for (let at = 0; at < range.clearBytes; ) {
        if (range.version !== version || range.ptr === undefined || range.destroyed) {
          complete = false; // changed while earlier pieces landed: the next settle copies it
          break;
        }
        const length = Math.min(pieceBytes, range.clearBytes - at);
        const read = this.buffers.backend.pageOutRead(range.segment, range.offset + at, length);
        if (read === null) {
          if (inFlight.length === 0) {
            room = false; // no copy of ours holds the reserve: no room will come
            complete = false;
            break;
          }
          await Promise.all(inFlight.splice(0));
          continue;
        }
        const start = at;
        const piece = read.bytes.then((b) => bytes.set(b.subarray(0, length), start));
        pieces.push(piece);
        inFlight.push(piece.catch(() => undefined));
        at += length;
        this.counts.hostCopyBytes += length;
      }
      this.counts.hostCopies++;
      const done = Promise.all(pieces).then(
        () => {
          if (range.copying === version) range.copying = -1;
          if (!complete || range.destroyed || range.version !== version || range.ptr === undefined) return;
          range.host = bytes;
          this.#clean.add(range);
        },
        () => {
          if (range.copying === version) range.copying = -1;
        },
      );
      landed.push(done);
    }
    await Promise.all(landed);
  }

  /** True when an open encoder (or a bind group being made) names `range`. */
  #isOpen(range: Range): boolean {
    for (const ref of this.#open) {
      const set = ref.deref();
      if (set !== undefined && !set.closed && set.ranges.has(range)) return true;
    }
    return false;
  }

  #pruneOpen(): void {
    for (const ref of this.#open) {
      const set = ref.deref();
      if (set === undefined || set.closed) this.#open.delete(ref);
    }
  }

  /** Pages out clean ranges no open encoder names, least recently used first, until `bytes` were freed; returns the bytes freed. */
  #pageOut(bytes: number): number {
    this.#pruneOpen();
    const victims = [...this.#clean].filter((r) => !this.#isOpen(r)).sort((a, b) => a.lastUse - b.lastUse);
    let freed = 0;
    // Every submit that used a victim completed (its host copy landed after them): its place is free at once.
    this.buffers.freeingSubmitted(() => {
      for (const range of victims) {
        if (freed >= bytes) break;
        this.buffers.free(range.ptr!);
        range.ptr = undefined;
        this.#clean.delete(range);
        freed += range.clearBytes;
        this.counts.pagedOut++;
        this.counts.pagedOutBytes += range.clearBytes;
      }
    });
    return freed;
  }

  /** Gives a paged-out `range` a new place holding its bytes (none when `wholeWrite`); it stays clean. */
  #pageIn(range: Range, wholeWrite: boolean): void {
    const ptr = this.allocate(range.clearBytes, range.uniform ? { usage: 'uniform' } : undefined); // a uniform range stays in uniform segments (Note [Uniform ranges])
    const { buffer, offset } = this.buffers.bindingOf(ptr);
    range.ptr = ptr;
    range.segment = buffer;
    range.offset = offset;
    range.generation++;
    this.counts.pagedIn++;
    if (!wholeWrite && range.host !== undefined) {
      this.queue.writeBuffer(buffer, offset, range.host);
      this.counts.pagedInBytes += range.clearBytes;
    }
    if (range.host !== undefined) this.#clean.add(range);
  }
}
