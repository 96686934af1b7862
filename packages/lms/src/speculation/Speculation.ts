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
 *   wasted). So a wrong prediction costs a copy, never a result. Past the learned iteration's last reclaim, the
 *   page-out waits for the next iteration's first pin (Note [Page-outs past the last reclaim]). Unlike IBM's, the bit for an unpin is set by
 *   whichever reclaim follows it, in this iteration or the next: persistent storages (weights, optimizer state
 *   unpinned at the end of one step and reclaimed in the next) are predicted too.
 * - Prefetch (IBM has none; `speculation.prefetch`): at each pin, the learned sequence's coming events (up to
 *   `lookahead`; by default the rest of the iteration) are scanned for pins of storages that are reclaimed now with
 *   their bytes on the host, and each is paged in (left inactive, at the reclaim list's most recent end), in pin
 *   order, while the room allows (Note [Prefetch room]): into free room, or (within RECLAIM_HORIZON events) into
 *   room the policy's victims give back when each of them is used later than the prefetched storage (Belady's
 *   rule) and is reclaimed anyway by the
 *   learned sequence (predicted at its unpin; a speculative page-out may have copied it already); the room the
 *   sequence allocates before that pin stays free. The first storage that cannot come in ends the scan, and nothing
 *   is reclaimed for it. So a page-in starts as early as the room allows, behind as many kernels as that gives; a
 *   prefetch changes when victims leave, never which, and copies out nothing that would not be copied out anyway.
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
  /** Free room the device was known to have when the current prefetch began (Note [Prefetch room]). */
  #freeForPrefetch = 0;
  #prefetching = false;
  /** Where the last prefetch scan ended, and the device's reclaim count then: events before it need no new look. */
  #scannedTo = 0;
  #scannedAtReclaims = -1;
  /** Speculative page-outs held back to the next iteration's first pin, and the iteration that held them. */
  #heldBack: StorageResidency[] = [];
  #heldBackIn = -1;
  /** Speculative page-outs that found no room, oldest first: tried again at later pins (Note [Page-outs that found no room]). */
  #declined: StorageResidency[] = [];

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
    if (this.#heldBack.length > 0 && this.history.iteration !== this.#heldBackIn) this.#pageOutHeldBack();
    if (this.#declined.length > 0) this.#retryDeclined();
    if (this.settings.prefetch) this.#prefetch();
  }

  onUnpin(lms: StorageResidency): void {
    const index = this.history.record(AccessKind.Unpin, lms);
    lms.reclaimPredicted = index >= 0 && this.history.predictsReclaimAfter(index);
    if (!lms.reclaimPredicted || !this.settings.pageOut) return;
    if (this.history.predictsReclaimLater(index) || this.history.pinnedBytesAfter(index) > lms.byteLength) {
      this.#pageOutEarly(lms);
    } else {
      // Note [Page-outs past the last reclaim]
      this.#heldBack.push(lms);
      this.#heldBackIn = this.history.iteration;
    }
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

  /** A speculative page-out of `lms`, noted for a later try when it found no room (Note [Page-outs that found no room]). */
  #pageOutEarly(lms: StorageResidency): void {
    if (!lms.pageOutEarly(true)) this.#declined.push(lms);
  }

  /**
   * Tries again, oldest first, the page-outs that found no room, of storages still predicted reclaimed; stops at the
   * first that finds none again (the room is the limit, and the older ones are reclaimed sooner).
   */
  #retryDeclined(): void {
    const declined = this.#declined;
    let next = 0;
    for (; next < declined.length; next++) {
      const lms = declined[next]!;
      if (!lms.reclaimPredicted || lms.isReleased) continue;
      if (!lms.pageOutEarly(true)) break;
    }
    this.#declined = declined.slice(next);
  }

  /** Starts the page-outs held back at the end of the last iteration, of the storages still predicted reclaimed. */
  #pageOutHeldBack(): void {
    const held = this.#heldBack;
    this.#heldBack = [];
    for (const lms of held) if (lms.reclaimPredicted && !lms.isReleased) this.#pageOutEarly(lms);
  }

  /**
   * During a prefetch, called by the device's reclaim with the storages it may reclaim: throws (ending the
   * prefetch's allocation, nothing reclaimed by this call) when they, what the prefetch already freed and the free
   * room known when it began (Note [Prefetch room]) cannot make `bytes` of room and the sequence's own allocations.
   */
  checkPrefetchRoom(bytes: number, eligibleBytes: number): void {
    if (this.#freedForPrefetch + eligibleBytes + this.#freeForPrefetch < bytes + this.#reserve) throw PREFETCH_DECLINED;
  }

  /** During a prefetch: ends its allocation, nothing reclaimed by this call (the policy chose a storage used sooner). */
  decline(): never {
    throw PREFETCH_DECLINED;
  }

  /**
   * Pages in the storages the learned sequence pins in the next `lookahead` events, in the order they are pinned,
   * while the room test of Note [Prefetch room] passes (Note [Speculation]); stops at the first that cannot come in.
   */
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
    // The bytes the sequence makes minus those it releases between now and event i, and the most that sum reaches.
    let net = 0;
    let peak = 0;
    let room: PrefetchRoom | null = null;
    try {
      for (let i = from; i < end; i++) {
        const kind = predictor.kinds[i];
        if (kind === AccessKind.Create) {
          net += predictor.sizes[i]!;
          if (net > peak) peak = net;
        } else if (kind === AccessKind.Release) net -= predictor.sizes[i]!;
        if (i < start || kind !== AccessKind.Pin) continue;
        const lms = history.storageAt(i);
        if (lms === undefined || lms.isReleased || lms.state !== 'reclaimed' || lms.lmsDevice !== this.device) continue;
        room ??= this.#roomNow();
        // Beyond RECLAIM_HORIZON only free room serves (Note [Prefetch room]): the floor no victim can pass.
        const floor = i - from <= RECLAIM_HORIZON ? i - from : Number.POSITIVE_INFINITY;
        if (!lms.hostCopyReady || !room.admits(lms.byteLength + peak, floor) || !this.#prefetchOne(lms, floor, peak, room.free)) {
          this.#scannedTo = i; // look here again next time
          return;
        }
        if (this.#freedForPrefetch > 0) room = null; // victims left: measure again
        else room.took(lms.byteLength);
      }
      this.#scannedTo = end;
    } finally {
      this.#prefetching = false;
      this.#scannedAtReclaims = this.device.stats.reclaimed;
    }
  }

  /** The device's room for prefetches now (Note [Prefetch room]). */
  #roomNow(): PrefetchRoom {
    const device = this.device;
    const history = this.history;
    const leaving: { nextUse: number; bytes: number }[] = [];
    for (const inactive of this.device.list) {
      if (!inactive.reclaimPredicted) continue;
      const nextUse = history.nextUse(inactive);
      if (nextUse !== undefined) leaving.push({ nextUse, bytes: inactive.byteLength });
    }
    return new PrefetchRoom(device.heldPeakBytes - device.heldBytes, leaving);
  }

  /**
   * Pages `lms` in, reclaiming only storages used later than `distance` events from now and leaving room for the
   * `reserve` bytes allocated before its pin, `freeBytes` being the free room known now; false when it cannot.
   */
  #prefetchOne(lms: StorageResidency, distance: number, reserve: number, freeBytes: number): boolean {
    this.#floor = distance;
    this.#freeForPrefetch = Math.max(0, freeBytes);
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

/**
 * Note [Page-outs past the last reclaim]: a speculative page-out started at an unpin that comes after the learned
 * iteration's last reclaim is not needed before the iteration ends: nothing reclaims the storage until the next one.
 * When the rest of the iteration pins fewer bytes than the storage holds, its operations are too short to hide the
 * copy (an optimizer's last updates: memory-bound kernels over fewer bytes than the copy moves over a link ten or
 * more times slower), and the loop's synchronization at the iteration's end waits for it. Such a page-out is held
 * back to the next iteration's first pin, where that iteration's first kernels can hide it; it is started then if
 * the storage is still predicted reclaimed (not pinned, released or reclaimed since). The bytes copied are the
 * same; only when changes. Holding back every page-out past the last reclaim cost time where the next iteration's
 * first operations are page-out bound themselves: on the published GPT-2 setup (`pnpm bench:lms -- --published`,
 * PCIe 3) the optimizer state's page-outs, hidden under the optimizer's page-ins before, then queued ahead of the
 * activations' (107.7 → 108.8 s a step); held back only past the pinned-bytes test, VGG-16's fc6 update still is.
 */

/**
 * Note [Page-outs that found no room]: a speculative page-out starts at the unpin after which the learned sequence
 * reclaims the storage; on a device whose copies stage through device memory (WebGPU) it may find no room then
 * (staging of earlier page-outs in flight, or room the next allocations need: `Residency#roomForEarlyPageOut`).
 * Dropped, the reclaim that comes later copies on demand, where nothing hides the copy (a speculative miss). So it is
 * kept and tried again at each later pin, by which time earlier copies may have landed, while the storage is still
 * predicted reclaimed and not released (a pin makes it active: its next unpin decides again). On the WebGPU loop
 * (`node tools/lab/dist-bench/train/lms.bench.js --quick`), waiting for page-outs only for room (Note [Waiting for
 * page-outs] in Residency.ts) had lowered recall from 1.00 to 0.66–0.88 without these tries.
 */

/**
 * Note [Prefetch room]: a prefetch takes room that the sequence may need before the prefetched storage's pin; if the
 * operations in between then have to reclaim it, or a storage used sooner, the prefetch cost a copy instead of
 * hiding one. So a storage pinned `distance` events ahead comes in only when
 *
 *   its bytes + the most the sequence makes (net of releases) before its pin ≤ free + leaving(distance)
 *
 * where free is the bytes the storages under LMS are known to be able to hold (the most they have held at once,
 * Note [Held bytes] in Residency.ts) minus those they hold now, and leaving(distance) is the bytes of inactive
 * storages the learned sequence reclaims anyway and uses later than the prefetched one: those a reclaim may take for
 * it (Belady's rule), now or when the sequence's allocations need their room. Prefetches go in pin order and stop
 * at the first that fails, so every earlier pin's storage is in already; this is what lets the lookahead reach as
 * far as the room allows.
 *
 * Victims count only within RECLAIM_HORIZON events: a prefetch farther ahead takes free room alone. "Reclaimed
 * anyway" is learned from LMS's own schedule, so a victim taken early for a far prefetch is then predicted
 * reclaimed because of it, and the next iteration takes it again even where a demand schedule would have kept it:
 * on the bench's generated traces (`pnpm bench:lms`), victims at any distance moved 1.19 × Belady-MIN's bytes on
 * the U-Net at P/4 and 1.24 × on the optimizer trace at P/2; within 16 events, 1.03 × and 1.03 ×.
 */
class PrefetchRoom {
  /** `leaving` sorted by next use, ascending; `laterBytes[k]`: the bytes of entries k and after. */
  readonly #nextUses: number[];
  readonly #laterBytes: number[];
  /** Free bytes, as far as known. */
  #freeBytes: number;

  constructor(freeBytes: number, leaving: { nextUse: number; bytes: number }[]) {
    this.#freeBytes = freeBytes;
    leaving.sort((a, b) => a.nextUse - b.nextUse);
    this.#nextUses = leaving.map((l) => l.nextUse);
    this.#laterBytes = new Array<number>(leaving.length + 1);
    this.#laterBytes[leaving.length] = 0;
    for (let k = leaving.length - 1; k >= 0; k--) this.#laterBytes[k] = this.#laterBytes[k + 1]! + leaving[k]!.bytes;
  }

  /** True when `bytes` fit in the free room and the room of storages used later than `distance` events from now. */
  admits(bytes: number, distance: number): boolean {
    const uses = this.#nextUses;
    let lo = 0;
    let hi = uses.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (uses[mid]! <= distance) lo = mid + 1;
      else hi = mid;
    }
    return bytes <= this.#freeBytes + this.#laterBytes[lo]!;
  }

  /** Free bytes, as far as known. */
  get free(): number {
    return this.#freeBytes;
  }

  /** A prefetch took `bytes` of free room. */
  took(bytes: number): void {
    this.#freeBytes -= bytes;
  }
}

/** Events ahead within which a prefetch may reclaim (Note [Prefetch room]); farther, it takes free room only. */
const RECLAIM_HORIZON = 16;

/** Thrown through the caching engine by a reclaim that may not make room for a prefetch; never reaches a caller. */
class PrefetchDeclined extends Error {
  constructor() {
    super('LMS declined to reclaim for a prefetch: only storages used sooner could make room.');
    this.name = 'PrefetchDeclined';
  }
}

const PREFETCH_DECLINED = new PrefetchDeclined();
