import type { LmsState, LmsStorage, PageOut, StorageImpl } from '@stowage/core';
import { InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import { PageInPendingError } from './errors.js';
import type { LmsDevice } from './LmsDevice.js';
import type { ReclaimList, ReclaimNode } from './ReclaimList.js';

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
export class LmsStorageImpl implements LmsStorage, ReclaimNode {
  reclaimPrev: ReclaimNode | null = null;
  reclaimNext: ReclaimNode | null = null;
  reclaimList: ReclaimList<ReclaimNode> | null = null;
  /** The device's unpin count at this storage's last unpin (for policies: larger is more recent). */
  unpinnedAt = 0;
  #state: LmsState = 'allocated';
  #pins = 0;
  /** The host copy of the bytes (Note [Host copies]), complete or in flight; null when none is valid. */
  #host: PageOut | null = null;
  #released = false;

  constructor(
    readonly storage: StorageImpl,
    readonly lmsDevice: LmsDevice,
  ) {}

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
    if (this.#released) throw new UseAfterReleaseError(`Cannot pin a released ${this.storage.byteLength}-byte storage.`);
    if (this.#pins === 0) {
      const device = this.lmsDevice;
      if (this.#state === 'reclaimed') this.#pageIn(); // throws before anything changes
      else if (this.#state === 'inactive') device.list.remove(this);
      this.#state = 'active';
      device.stats.pin(this.storage.byteLength);
      device.policy.onPin?.(this.storage);
    }
    this.#pins++;
  }

  unpin(): void {
    if (this.#pins === 0) {
      throw new InvalidArgumentError('unpin()', `a storage in state '${this.#state}'`, 'matched by an earlier pin(): this storage is not pinned');
    }
    if (--this.#pins > 0) return;
    const device = this.lmsDevice;
    this.#state = 'inactive';
    device.stats.unpin(this.storage.byteLength);
    if (!this.#released) {
      device.list.pushBack(this);
      this.unpinnedAt = ++device.unpinClock;
      device.policy.onUnpin?.(this.storage);
    }
  }

  access(write: boolean): void {
    if (this.#released) return; // the storage reports its own use after release
    if (this.#state === 'reclaimed') {
      this.#pageIn();
      this.#state = 'inactive';
      this.lmsDevice.list.pushBack(this);
      this.unpinnedAt = ++this.lmsDevice.unpinClock;
    }
    if (write && this.#host !== null) this.#dropHostCopy();
  }

  ready(): Promise<void> {
    const host = this.#host;
    if (this.#state !== 'reclaimed' || host === null || host.bytes !== null) return Promise.resolve();
    const stats = this.lmsDevice.stats;
    const start = performance.now();
    return host.done.then(() => {
      stats.waitMs += performance.now() - start;
    });
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    const device = this.lmsDevice;
    device.list.remove(this);
    device.forgetReclaimed(this);
    if (this.#host !== null) this.#dropHostCopy();
    device.policy.onRelease?.(this.storage);
  }

  /**
   * Pages the storage out (unless a host copy is valid) and frees its block: for the device's reclaim, on an
   * inactive storage whose pointer the allocator placed. Returns the bytes freed.
   */
  reclaim(): number {
    const device = this.lmsDevice;
    const storage = this.storage;
    const ptr = storage.peekDataPtr();
    const bytes = ptr.byteLength;
    const copied = this.#host === null;
    if (copied) {
      this.#host = device.pager.pageOut(ptr);
      device.stats.pageOut++;
      device.stats.pageOutBytes += bytes;
      device.stats.addHost(bytes);
    }
    device.list.remove(this);
    this.#state = 'reclaimed';
    device.rememberReclaimed(this);
    device.stats.reclaimed++;
    device.stats.reclaimedBytes += bytes;
    // Note [Paging in device order] in core's Pager: the copy is ordered before any later use of the block.
    ptr.letGo(storage);
    ptr.release();
    device.policy.onReclaim?.(storage);
    if (device.events.listenerCount('pageOut') > 0) device.events.safeEmit('pageOut', { storage, bytes, copied });
    return bytes;
  }

  /**
   * Allocates a block, copies the host bytes into it and makes it the storage's pointer. Changes nothing when it
   * throws: PageInPendingError while the bytes are in flight; OutOfMemoryError when the device has no room even
   * after reclaiming other storages.
   */
  #pageIn(): void {
    const bytes = this.#host!.bytes;
    const storage = this.storage;
    if (bytes === null) throw new PageInPendingError(storage.byteLength);
    const device = this.lmsDevice;
    const ptr = storage.allocator.allocate(storage.byteLength, storage.allocateOptions ?? {});
    try {
      device.pager.pageIn(bytes, ptr);
    } catch (error) {
      ptr.release();
      throw error;
    }
    storage.setDataPtr(ptr);
    device.forgetReclaimed(this);
    device.stats.pageIn++;
    device.stats.pageInBytes += bytes.byteLength;
    if (device.events.listenerCount('pageIn') > 0) device.events.safeEmit('pageIn', { storage, bytes: bytes.byteLength });
  }

  #dropHostCopy(): void {
    this.lmsDevice.stats.hostBytes -= this.#host!.byteLength;
    this.#host = null;
  }
}
