import { OutOfMemoryError } from '@stowage/core';
import type { Residency } from '../Residency.js';
import type { StorageResidency } from '../StorageResidency.js';
import { AccessHistory } from './AccessHistory.js';
import { AccessKind } from './AccessRecording.js';
import type { SpeculationSettings } from './SpeculationOptions.js';

/**
 * Note [Speculation]: training and inference loops repeat, so LMS learns one iteration's sequence of storage events
 * (makes, pins from zero, last unpins, releases; the program marks each iteration's end with
 * `LmsController#endIteration`) and predicts the next iteration from it (AccessHistory). Three things use the
 * prediction, each on or off on its own:
 *
 * - Speculative page-out (IBM's `predict_reclaim`, `speculation.pageOut`): at the unpin of a storage whose unpin at
 *   the same point of the learned iteration was followed by a reclaim before its next pin, the page-out starts at
 *   once, on the device's copy engine, and the storage stays resident and inactive with a host copy. The reclaim,
 *   when it comes, only frees the block (a hit); a write first drops the copy (Note [Host copies] in
 *   StorageResidency.ts: every write goes through `mutableData()`), and the reclaim then copies again (counted
 *   wasted). So a wrong prediction costs a copy, never a result. Unlike IBM's, the bit for an unpin is set by
 *   whichever reclaim follows it, in this iteration or the next: persistent storages (weights, optimizer state
 *   unpinned at the end of one step and reclaimed in the next) are predicted too.
 * - Prefetch (IBM has none; `speculation.prefetch`): at each pin, the learned sequence's next `lookahead` events are
 *   scanned for pins of storages that are reclaimed now with their bytes on the host, and each is paged in (left
 *   inactive, at the reclaim list's most recent end) into free room, or into room the policy's victims give back
 *   when each of them is used later than the prefetched storage (Belady's rule) and is reclaimed anyway by the
 *   learned sequence (predicted at its unpin; a speculative page-out may have copied it already); the room the sequence allocates before that pin
 *   stays free. Otherwise the prefetch stops there and reclaims nothing. So it changes when victims leave, never
 *   which, and copies out nothing that would not be copied out anyway; what it can still cost is a page-in: a victim taken early is one a later
 *   allocation (a tensor made before the pin, used later still) would have spared (measured in `pnpm bench:lms`).
 * - Victims by next use: `ReclaimCandidate.nextUse` (events until the next predicted pin) for the `speculative`
 *   policy, which asks for predictions even with speculation off.
 *
 * When the current iteration leaves every learned sequence (another shape, a branch taken once), nothing is
 * predicted until its end: no speculative page-out, no prefetch, `nextUse` undefined (the `speculative` policy
 * chooses as `lru`); the iteration is learned, and predicts the next time the same sequence comes round.
 */
export class Speculation {
  readonly history: AccessHistory<StorageResidency>;
  /** While a prefetch makes room: only storages whose next use is farther than this may be reclaimed. */
  #floor: number | null = null;
  /** Bytes the current prefetch's reclaims freed so far. */
  #freedForPrefetch = 0;
  /** Bytes the learned sequence makes before the prefetched storage's pin: kept free for them. */
  #reserve = 0;
  #prefetching = false;
  /** Where the last prefetch scan ended, and the device's reclaim count then: events before it need no new look. */
  #scannedTo = 0;
  #scannedAtReclaims = -1;

  constructor(
    readonly device: Residency,
    readonly settings: SpeculationSettings,
  ) {
    this.history = new AccessHistory(settings.history);
  }

  /** During a prefetch: the next use a reclaimed storage must lie beyond; null otherwise. */
  get reclaimFloor(): number | null {
    return this.#floor;
  }

  onCreate(lms: StorageResidency): void {
    this.history.record(AccessKind.Create, lms);
  }

  onPin(lms: StorageResidency): void {
    this.history.record(AccessKind.Pin, lms);
    if (this.settings.prefetch) this.#prefetch();
  }

  onUnpin(lms: StorageResidency): void {
    const index = this.history.record(AccessKind.Unpin, lms);
    lms.reclaimPredicted = index >= 0 && this.history.predictsReclaimAfter(index);
    if (lms.reclaimPredicted && this.settings.pageOut) lms.pageOutEarly();
  }

  onRelease(lms: StorageResidency): void {
    this.history.record(AccessKind.Release, lms);
  }

  onReclaim(lms: StorageResidency): void {
    this.history.recordReclaim(lms);
    if (this.#floor !== null) this.#freedForPrefetch += lms.storage.byteLength;
  }

  /** Learns the iteration that ended; says whether it followed a learned sequence to the end, or left every one. */
  endIteration(): { readonly predicted: boolean; readonly diverged: boolean } {
    this.#scannedTo = 0;
    this.#scannedAtReclaims = -1;
    return this.history.endIteration();
  }

  /**
   * During a prefetch, called by the device's reclaim with the storages it may reclaim: throws (ending the
   * prefetch's allocation, nothing reclaimed by this call) when they and what the prefetch already freed cannot
   * make `bytes` of room.
   */
  checkPrefetchRoom(bytes: number, eligibleBytes: number): void {
    if (this.#freedForPrefetch + eligibleBytes < bytes + this.#reserve) throw PREFETCH_DECLINED;
  }

  /** During a prefetch: ends its allocation, nothing reclaimed by this call (the policy chose a storage used sooner). */
  decline(): never {
    throw PREFETCH_DECLINED;
  }

  /** Pages in the storages the learned sequence pins in the next `lookahead` events (Note [Speculation]). */
  #prefetch(): void {
    const history = this.history;
    const predictor = history.predictor;
    if (predictor === null || this.#prefetching) return;
    const from = history.position;
    const end = Math.min(predictor.length, from + this.settings.lookahead);
    const reclaims = this.device.stats.reclaimed;
    if (this.device.reclaimedStorages.size === 0) {
      this.#scannedTo = end; // nothing to bring back: what a later scan needs to see is only what a reclaim changes
      this.#scannedAtReclaims = reclaims;
      return;
    }
    // Since the last scan, with no reclaim in between, only events past its end can hold a new candidate.
    const start = reclaims === this.#scannedAtReclaims ? Math.max(from, this.#scannedTo) : from;
    this.#prefetching = true;
    // The bytes allocated between now and event i: what the sequence makes before it.
    let before = 0;
    for (let i = from; i < start; i++) if (predictor.kinds[i] === AccessKind.Create) before += predictor.sizes[i]!;
    try {
      for (let i = start; i < end; i++) {
        const kind = predictor.kinds[i];
        if (kind === AccessKind.Create) before += predictor.sizes[i]!;
        if (kind !== AccessKind.Pin) continue;
        const lms = history.storageAt(i);
        if (lms === undefined || lms.isReleased || lms.state !== 'reclaimed' || lms.lmsDevice !== this.device) continue;
        if (!lms.hostCopyReady || !this.#prefetchOne(lms, i - from, before)) {
          this.#scannedTo = i; // look here again next time
          return;
        }
      }
      this.#scannedTo = end;
    } finally {
      this.#prefetching = false;
      this.#scannedAtReclaims = this.device.stats.reclaimed;
    }
  }

  /**
   * Pages `lms` in, reclaiming only storages used later than `distance` events from now and leaving room for the
   * `reserve` bytes allocated before its pin; false when it cannot.
   */
  #prefetchOne(lms: StorageResidency, distance: number, reserve: number): boolean {
    this.#floor = distance;
    this.#freedForPrefetch = 0;
    this.#reserve = reserve;
    try {
      return lms.prefetch();
    } catch (error) {
      if (error === PREFETCH_DECLINED || error instanceof OutOfMemoryError) return false;
      throw error;
    } finally {
      this.#floor = null;
    }
  }
}

/** Thrown through the caching engine by a reclaim that may not make room for a prefetch; never reaches a caller. */
class PrefetchDeclined extends Error {
  constructor() {
    super('LMS declined to reclaim for a prefetch: only storages used sooner could make room.');
    this.name = 'PrefetchDeclined';
  }
}

const PREFETCH_DECLINED = new PrefetchDeclined();
