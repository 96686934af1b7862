import type { DataPtr, LmsStorage, StorageImpl } from '@stowage/core';
import type { LmsState, PageOut } from '@stowage/core/plugin-kit';
import { DeviceError, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import { PageInPendingError } from './errors.js';
import type { Residency } from './Residency.js';
import type { ReclaimList, ReclaimNode } from './ReclaimList.js';
import type { LearnedStorage } from './speculation/AccessHistory.js';
import type { AccessRecording } from './speculation/AccessRecording.js';

/**
 * One storage's LMS object: its residency state, pin count, host copy and links on its device's reclaim list.
 * States and transitions as IBM LMS: allocated → active (pin) → inactive (last unpin: on the reclaim list) →
 * reclaimed (reclaim: bytes in host memory, block freed) → active (pin) or inactive (access without a pin).
 *
 * Note [Host copies]: a page-out leaves a host copy of the bytes; a page-in keeps it. While the storage is not
 * written (every write goes through `mutableData()`, which calls `access(true)`), the copy stays valid and a
 * later reclaim only frees the block. A write drops it.
 *
 * Note [Access outside a pin]: `data()` or `mutableData()` of an unpinned storage brings it back if reclaimed,
 * and leaves it inactive: the pointer is valid until the next allocation on the device, which may reclaim it
 * again. Operations pin (`pin(...)`) for as long as they use a pointer.
 *
 * Invariants: state === 'active' iff pins > 0; on the reclaim list iff state === 'inactive' and not released;
 * state === 'reclaimed' implies host !== null and the storage's pointer released; host bytes counted in the
 * device's stats iff host !== null.
 */
export class StorageResidency implements LmsStorage, ReclaimNode, LearnedStorage {
  reclaimPrev: ReclaimNode | null = null;
  reclaimNext: ReclaimNode | null = null;
  reclaimList: ReclaimList<ReclaimNode> | null = null;
  /** @internal the learned sequence's names for this storage (AccessHistory) */
  seenIteration = -1;
  /** @internal */
  ordinal = 0;
  /** @internal */
  lastUnpin: AccessRecording<LearnedStorage> | null = null;
  /** @internal */
  lastUnpinIndex = 0;
  /**
   * True from an unpin after which the learned sequence reclaims the storage before its next pin (Note
   * [Speculation]) until that pin or reclaim: a prefetch may take its room.
   * @internal
   */
  reclaimPredicted = false;
  /** The device's unpin count at this storage's last unpin (for policies: larger is more recent). */
  unpinnedAt = 0;
  #state: LmsState = 'allocated';
  #pins = 0;
  /** The bytes counted as pinned at the pin from zero (a resize while pinned changes the storage's size). */
  #pinnedBytes = 0;
  /** Why the current host copy's page-out failed, once it did. */
  #hostFailure: unknown;
  /** The host copy of the bytes (Note [Host copies]), complete or in flight; null when none is valid. */
  #host: PageOut | null = null;
  /** The host copy was made by a speculative page-out (Note [Speculation]), and no reclaim has used it yet. */
  #hostUnusedSpeculation = false;
  /** Brought in by a prefetch, and not pinned since. */
  #prefetched = false;
  #released = false;
  /** The device bytes this storage is counted as holding (Note [Held bytes] in Residency.ts): 0 while reclaimed. */
  #heldBytes: number;

  constructor(
    readonly storage: StorageImpl,
    readonly lmsDevice: Residency,
  ) {
    this.#heldBytes = storage.byteLength;
    lmsDevice.held(this.#heldBytes);
    lmsDevice.made(this.#heldBytes);
    lmsDevice.learner?.onCreate(this);
  }

  get byteLength(): number {
    return this.storage.byteLength;
  }

  get state(): LmsState {
    return this.#state;
  }

  get pinCount(): number {
    return this.#pins;
  }

  get isReleased(): boolean {
    return this.#released;
  }

  /** True when a host copy exists (complete or in flight): reclaiming copies nothing. */
  get hasHostCopy(): boolean {
    return this.#host !== null;
  }

  /** True when the bytes are in host memory now, so a page-in can start at once. */
  get hostCopyReady(): boolean {
    return this.#host !== null && this.#host.bytes !== null;
  }

  pin(): void {
    if (this.pinUnrecorded()) this.lmsDevice.learner?.onPin(this);
  }

  /**
   * Pins without telling the learner (Note [Speculation]); returns true when this pin made the storage active. For
   * `pin(...)`, which tells it of one operation's pins in the order the caller gave them, whatever order they were
   * pinned in. `late`: the storage was reclaimed with its bytes still on their way to the host when the pin was
   * asked for (`pinAsync` waited for them), for `page_in_ready_before_use` (Note [Ready before use] in LmsStats.ts).
   * @internal
   */
  pinUnrecorded(late = false): boolean {
    if (this.#released) throw new UseAfterReleaseError(`Cannot pin a released ${this.storage.byteLength}-byte storage.`);
    if (this.#pins > 0) {
      this.#pins++;
      return false;
    }
    const device = this.lmsDevice;
    const predicted = (this.#state === 'reclaimed' || this.#prefetched) && device.learner?.history.predictor != null;
    const pagedIn = this.#state === 'reclaimed' ? this.#pageIn(false) : 0; // throws before anything changes
    if (predicted) device.stats.predictedPageIn(this.#prefetched || !late);
    if (this.#pins > 0) {
      this.#pins++; // pinned while it was being brought back (a listener): that pin made it active
      return false;
    }
    device.list.remove(this);
    this.#state = 'active';
    this.#pins = 1;
    this.reclaimPredicted = false;
    this.#pinnedBytes = this.storage.byteLength;
    device.stats.pin(this.#pinnedBytes);
    if (this.#prefetched) {
      this.#prefetched = false;
      device.stats.prefetchHit();
    }
    device.notifyPolicy('onPin', this.storage);
    if (pagedIn > 0) device.emitPagedIn(this.storage, pagedIn);
    return true;
  }

  unpin(): void {
    if (this.unpinUnrecorded()) this.lmsDevice.learner?.onUnpin(this);
  }

  /**
   * Unpins without telling the learner; returns true when this unpin made the storage inactive (and it is not
   * released). For `PinGuard`, as `pinUnrecorded`.
   * @internal
   */
  unpinUnrecorded(): boolean {
    if (this.#pins === 0) {
      throw new InvalidArgumentError('unpin()', `a storage in state '${this.#state}'`, 'matched by an earlier pin(): this storage is not pinned');
    }
    if (--this.#pins > 0) return false;
    const device = this.lmsDevice;
    this.#state = 'inactive';
    device.stats.unpin(this.#pinnedBytes); // what was counted at the pin, whatever a resize did since
    if (this.#released) return false;
    device.list.pushBack(this);
    this.unpinnedAt = ++device.unpinClock;
    device.notifyPolicy('onUnpin', this.storage);
    return true;
  }

  access(write: boolean): void {
    if (this.#released) return; // the storage reports its own use after release
    if (this.#state === 'reclaimed') {
      const pagedIn = this.#pageIn(false);
      if (this.#state === 'reclaimed') {
        this.#state = 'inactive';
        this.lmsDevice.list.pushBack(this);
        this.unpinnedAt = ++this.lmsDevice.unpinClock;
      }
      if (pagedIn > 0) this.lmsDevice.emitPagedIn(this.storage, pagedIn);
    }
    if (write && this.#host !== null) this.#dropHostCopy();
  }

  ready(): Promise<void> {
    const host = this.#host;
    if (this.#state !== 'reclaimed' || host === null || host.bytes !== null) return Promise.resolve();
    const stats = this.lmsDevice.stats;
    const start = performance.now();
    return host.done.then(() => {
      stats.waited(performance.now() - start);
    });
  }

  /**
   * Resolves once no page-out of this storage is in flight, in any state: its host copy, if it has one, is
   * complete (`hostCopyReady`) or its page-out failed. Never rejects. For callers that make host copies ahead
   * (`pageOutEarly`) and must know they landed before synchronous work that may reclaim the storage.
   */
  hostCopySettled(): Promise<void> {
    const host = this.#host;
    if (host === null || host.bytes !== null) return Promise.resolve();
    return host.done.then(
      () => undefined,
      () => undefined,
    );
  }

  readHostCopy(): Promise<Uint8Array> | null {
    const host = this.#host;
    if (this.#state !== 'reclaimed' || host === null) return null;
    // The host copy never changes once set (a later write drops it, not changes it): the bytes as of this call.
    if (host.bytes !== null) return Promise.resolve(host.bytes.slice());
    const stats = this.lmsDevice.stats;
    const start = performance.now();
    const byteLength = this.storage.byteLength;
    return host.done.then(
      (bytes) => {
        stats.waited(performance.now() - start);
        return bytes.slice();
      },
      (error: unknown) => {
        const reason = error instanceof Error ? error.message : String(error);
        throw new DeviceError(`Cannot read a reclaimed ${byteLength}-byte storage: its page-out failed (${reason}), so its bytes are lost.`, { cause: error });
      },
    );
  }

  /**
   * StorageImpl#release's hook: the storage is being released (LmsStorage#release).
   * @throws InvalidArgumentError, changing nothing, while the storage itself is not released: release the storage
   * (`storage.release()`), which calls this
   */
  release(): void {
    if (this.#released) return;
    if (!this.storage.isReleased) {
      throw new InvalidArgumentError('release()', `the LMS object of a live ${this.storage.byteLength}-byte storage`, 'called by StorageImpl#release only: release the storage itself (storage.release())');
    }
    this.#released = true;
    const device = this.lmsDevice;
    this.#letGoHeld();
    device.list.remove(this);
    device.forgetReclaimed(this);
    if (this.#host !== null) this.#dropHostCopy();
    this.#dropPrefetch();
    device.notifyPolicy('onRelease', this.storage);
    device.learner?.onRelease(this);
  }

  /**
   * Starts the page-out of an inactive storage now and keeps it resident (a speculative page-out, Note
   * [Speculation]): a later reclaim only frees its block. Nothing happens when a host copy is valid already, or
   * the block is not one the allocator placed (it is never reclaimed). Returns false when the copy did not start
   * for lack of room on the device: the pager refused it (Note [Page-outs the device refuses] in Residency.ts), or,
   * with `leaveRoom` (speculation's page-outs), it would leave too little room for the program's next allocations
   * (`Residency#roomForEarlyPageOut`); it may start once the page-outs in flight landed
   * (`Residency#settlePageOuts`). True otherwise.
   */
  pageOutEarly(leaveRoom = false): boolean {
    if (this.#state !== 'inactive' || this.#host !== null || this.#released) return true;
    const device = this.lmsDevice;
    const ptr = this.storage.peekDataPtr();
    if (device.inspector.describeBlock(ptr) === undefined) return true;
    // Speculation's copies (`leaveRoom`) not when they would take room the program's next allocations need:
    // `pinAsync` would wait for them to land. A caller that wants the copy now (an async point's) takes the room.
    if (leaveRoom && !device.roomForEarlyPageOut(ptr.byteLength)) return false;
    if (!this.#startPageOut(ptr, true)) return false; // no room for the copy now: the reclaim makes it, if one comes
    this.#hostUnusedSpeculation = true;
    return true;
  }

  /**
   * Takes `bytes` as the storage's host copy (Note [Host copies]) without a page-out: for a caller that has just
   * written exactly these bytes (an upload from host values), so that a later reclaim only frees the block and a
   * page-in can start at once. LMS keeps `bytes` (the caller must not change them). Nothing happens for a storage
   * released, reclaimed, or with a host copy already; a later write drops it, as any host copy.
   * @throws InvalidArgumentError, changing nothing, when `bytes` is not the storage's length
   */
  adoptHostCopy(bytes: Uint8Array): void {
    if (this.#released || this.#state === 'reclaimed' || this.#host !== null) return;
    if (bytes.byteLength !== this.storage.byteLength) {
      throw new InvalidArgumentError('bytes.byteLength', bytes.byteLength, `the storage's byte length (${this.storage.byteLength})`);
    }
    this.#host = { byteLength: bytes.byteLength, bytes, done: Promise.resolve(bytes) };
    this.#hostFailure = undefined;
    this.lmsDevice.stats.hostCopyAdopted(bytes.byteLength);
  }

  /**
   * Brings a reclaimed storage back ahead of its pin and leaves it inactive, the most recently unpinned (a
   * prefetch, Note [Speculation]); false when it is not reclaimed, its bytes are not on the host yet, or what
   * bringing it back ran brought it back first. Throws what the allocation throws (OutOfMemoryError), changing
   * nothing.
   */
  prefetch(): boolean {
    if (this.#state !== 'reclaimed' || this.#released || !this.hostCopyReady) return false;
    const device = this.lmsDevice;
    const pagedIn = this.#pageIn(true);
    if (pagedIn === 0 || this.#state !== 'reclaimed') return false;
    this.#state = 'inactive';
    device.list.pushBack(this);
    this.unpinnedAt = ++device.unpinClock;
    this.#prefetched = true;
    device.emitPagedIn(this.storage, pagedIn);
    return true;
  }

  /**
   * Pages the storage out (unless a host copy is valid) and frees its block: for the device's reclaim, on an
   * inactive storage whose pointer the allocator placed. Returns the bytes freed: 0, changing nothing, when the
   * pager refused the page-out (no room on the device for the copy now: Note [Page-outs the device refuses] in
   * Residency.ts).
   * @throws InvalidArgumentError, changing nothing, for a storage that is not inactive (pinned, never pinned,
   * reclaimed already, released) or whose block the allocator did not place (COW-shared, imported): LMS never
   * reclaims those
   */
  reclaim(): number {
    const device = this.lmsDevice;
    const storage = this.storage;
    if (this.#released || this.#state !== 'inactive') {
      throw new InvalidArgumentError('reclaim()', `a storage in state '${this.#released ? 'released' : this.#state}'`, 'an inactive storage (pinned once and unpinned since): LMS reclaims only those');
    }
    const ptr = storage.peekDataPtr();
    if (device.inspector.describeBlock(ptr) === undefined) {
      throw new InvalidArgumentError('reclaim()', 'a storage whose block the allocator did not place', 'a storage on a block of its own allocator (not COW-shared, not imported): LMS reclaims only those');
    }
    const bytes = ptr.byteLength;
    const copied = this.#host === null;
    if (copied) {
      if (!this.#startPageOut(ptr, false)) return 0;
      if (device.speculation.pageOut) device.stats.speculation(false);
    } else if (this.#hostUnusedSpeculation) {
      this.#hostUnusedSpeculation = false;
      device.stats.speculation(true);
    }
    this.#dropPrefetch();
    this.reclaimPredicted = false;
    device.list.remove(this);
    this.#state = 'reclaimed';
    device.rememberReclaimed(this);
    this.#letGoHeld();
    device.stats.reclaim(bytes);
    // Note [Paging in device order] in core's Pager: the copy is ordered before any later use of the block.
    ptr.letGo(storage);
    ptr.release();
    device.notifyPolicy('onReclaim', storage);
    device.learner?.onReclaim(this);
    device.emitPagedOut(storage, bytes, copied, ptr.address);
    return bytes;
  }

  /**
   * Enqueues the page-out of `ptr` (this storage's pointer) as the host copy, counted in the device's stats
   * (`speculative`: at an unpin, ahead of a predicted reclaim); false, changing nothing, when the pager refused it.
   */
  #startPageOut(ptr: DataPtr, speculative: boolean): boolean {
    const device = this.lmsDevice;
    const host = device.pager.pageOut(ptr);
    if (host === null) {
      device.pageOutRefused();
      return false;
    }
    this.#host = host;
    device.trackPageOut(host);
    this.#hostFailure = undefined;
    host.done.catch((error: unknown) => {
      if (this.#host === host) this.#hostFailure = error;
    });
    device.stats.pageOut(ptr.byteLength, speculative);
    return true;
  }

  /** A prefetched storage leaves the device (reclaimed) or goes (released) before any pin: the prefetch was wasted. */
  #dropPrefetch(): void {
    if (!this.#prefetched) return;
    this.#prefetched = false;
    this.lmsDevice.stats.prefetchWasted(this.storage.byteLength);
  }

  /**
   * Allocates a block, copies the host bytes into it and makes it the storage's pointer; returns the bytes paged
   * in, or 0 when something the allocation ran (a listener) brought the storage back first. Changes nothing when
   * it throws: PageInPendingError while the bytes are in flight; DeviceError when the page-out failed (the bytes
   * are lost); OutOfMemoryError when the device has no room even after reclaiming other storages.
   */
  #pageIn(prefetch: boolean): number {
    const bytes = this.#host!.bytes;
    const storage = this.storage;
    if (bytes === null) {
      if (this.#hostFailure !== undefined) {
        const reason = this.#hostFailure instanceof Error ? this.#hostFailure.message : String(this.#hostFailure);
        throw new DeviceError(`Cannot bring back a reclaimed ${storage.byteLength}-byte storage: its page-out failed (${reason}), so its bytes are lost.`, { cause: this.#hostFailure });
      }
      throw new PageInPendingError(storage.byteLength);
    }
    const device = this.lmsDevice;
    const ptr = storage.allocator.allocate(storage.byteLength, storage.allocateOptions ?? {});
    if (this.#state !== 'reclaimed' || this.#released) {
      ptr.release(); // brought back (or released) by what the allocation ran: this block is not needed
      return 0;
    }
    try {
      device.pager.pageIn(bytes, ptr);
    } catch (error) {
      ptr.release();
      throw error;
    }
    storage.setDataPtr(ptr);
    device.forgetReclaimed(this);
    this.#heldBytes = bytes.byteLength;
    device.held(this.#heldBytes);
    device.stats.pageIn(bytes.byteLength, prefetch);
    return bytes.byteLength;
  }

  #letGoHeld(): void {
    this.lmsDevice.held(-this.#heldBytes);
    this.#heldBytes = 0;
  }

  #dropHostCopy(): void {
    const stats = this.lmsDevice.stats;
    if (this.#host!.bytes === null) this.#host!.cancel?.(); // in flight: its device memory (staging) goes back now
    stats.dropHost(this.#host!.byteLength, this.#hostUnusedSpeculation);
    this.#hostUnusedSpeculation = false;
    this.#host = null;
  }
}
