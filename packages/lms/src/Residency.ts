import type { BlockInspector, Device, Pager, StorageImpl, Token } from '@stowage/core';
import type { PageOut, PagingRoom, ReclaimTarget } from '@stowage/core/plugin-kit';
import type { LmsPolicy, ReclaimCandidate, ReclaimRequest } from './LmsPolicy.js';
import { chooseFragments, chooseOne } from './LmsPolicy.js';
import type { AllocSource } from './LmsStats.js';
import { LmsStats } from './LmsStats.js';
import type { LmsEvents, LmsEventSource } from './LmsEvents.js';
import { SafeEmitter } from '@stowage/core/plugin-kit';
import { StorageResidency } from './StorageResidency.js';
import { ReclaimList } from './ReclaimList.js';
import { Speculation } from './speculation/Speculation.js';
import type { SpeculationSettings } from './speculation/SpeculationOptions.js';
import { SPECULATION_OFF } from './speculation/SpeculationOptions.js';
import { AccessKind } from './speculation/AccessRecording.js';

/**
 * LMS on one allocator (one device): its reclaim list of inactive storages, its reclaimed storages, statistics,
 * and the reclaim the runtime's LmsReclaimer runs when the caching engine has no room.
 *
 * Note [Reclaim steps]: each call does one of IBM's steps, smallest first, and the engine retries the allocation
 * after each (and calls again while it fails and something was freed): reclaim_one (the policy's one storage
 * whose freed block, merged with its free neighbours, holds the request), else reclaim_fragments (the policy's
 * storages that free room together), else reclaim_all (every inactive storage the allocator placed). Only
 * candidates of the request's pool, segment kind and stream are offered for the first two steps; reclaim_all takes
 * every kind, so that whole segments can be released and reserved again for the request.
 *
 * Note [Page-outs the device refuses]: a page-out may need device memory until its bytes land (WebGPU copies into
 * a staging buffer inside the device's budget, Note [One budget] in @stowage/allocator-webgpu), and the pager
 * refuses one that has no room (`pageOut` returns null). The refused storage stays as it was, and the step is
 * taken again without it, so the policy's next choice — a storage whose host copy exists copies nothing and needs
 * no room — serves instead; when nothing can be reclaimed the engine's chain ends in OutOfMemoryError. Reclaiming
 * a storage whose copy is still in flight gains nothing on such a device until it lands, so `pinAsync` waits for
 * page-outs in flight when the room they hold is needed (Note [Waiting for page-outs]), and retries a pin that ran
 * out of memory once the oldest landed. A storage released or rewritten while its page-out is in flight cancels it
 * (`PageOut.cancel`): the device's room comes back at once.
 *
 * Note [Waiting for page-outs]: an operation's allocations run synchronously after its `pinAsync` (its outputs),
 * and so do the reclaims they need, which cannot wait for a page-out to land. So `pinAsync` makes sure, before its
 * pins and again after them (their page-ins' reclaims may have started page-outs), that the bytes to come fit:
 * the pin's page-ins and the bytes the program allocates before its next pin (`expectedAllocationBytes`: what the
 * learned sequence makes until then when it predicts, else the most made between two pins so far). They fit when
 * the device's pager says so (Note [Paging room] in core's Pager): within the segments' headroom, or with the
 * page-outs in flight and those the reclaims may start within the paging reserve. Otherwise it waits for page-outs
 * in flight, oldest first (they land in that order), until they fit or none is left: a wait only when the room is
 * needed, where waiting for every page-out made each pin wait for the copies the last ones started. A pager
 * without `pagingRoom` cannot tell, and every page-out in flight is waited for (`settlePageOuts`).
 * A copy lands for the program only when its event loop turns (WebGPU resolves `mapAsync` then): while page-outs
 * are in flight, `pinAsync` lets it turn once every POLL_INTERVAL_MS (`pollPageOuts`), so that copies done on the
 * device are on the host before the pins and prefetches that need them (Note [Speculation]).
 */
export class DeviceResidency {
  readonly list = new ReclaimList<StorageResidency>();
  readonly stats = new LmsStats();
  readonly #emitter = new SafeEmitter<LmsEvents>();
  /**
   * `pagedOut` and `pagedIn` for every storage paged, `listenerFailed` for a listener or policy hook that threw:
   * listen only (LMS emits); listeners cannot break the allocation they run in.
   */
  readonly events: LmsEventSource = this.#emitter;
  /** Unpins so far: the clock of `unpinnedAt`. */
  unpinClock = 0;
  /** The step the last reclaim took, for `alloc_distribution`; reset by the allocator before each allocation. */
  lastStep: AllocSource | null = null;
  readonly #reclaimed = new Set<StorageResidency>();
  readonly #policyOf: () => LmsPolicy;
  readonly speculation: SpeculationSettings;
  /** What learns the program's sequence (Note [Speculation]); null when nothing needs it; decided on first use. */
  #learner: Speculation | null | undefined;
  /** Page-outs whose bytes are not on the host yet. */
  readonly #inFlight = new Set<Promise<unknown>>();
  /** A page-out was refused since the page-outs in flight last settled (Note [Page-outs the device refuses]). */
  #refusedSinceSettled = false;
  /** Storages whose page-out was refused during the current reclaim call. */
  #refused: Set<StorageResidency> | null = null;
  /** Device bytes the storages under LMS hold now (Note [Held bytes]), and the most they held at once. */
  #heldBytes = 0;
  #heldPeakBytes = 0;
  /** Bytes of storages made since the last `pinAsync` on this device, and the most made between two (Note [Waiting for page-outs]). */
  #madeSincePin = 0;
  #mostMadeBetweenPins = 0;
  /** When `pollPageOuts` last let the event loop turn (performance.now()). */
  #polledAt = Number.NEGATIVE_INFINITY;

  constructor(
    readonly device: Device,
    /** The device's pager and block inspector (device services: Note [Device services] in core). */
    readonly pager: Pager,
    readonly inspector: BlockInspector,
    policyOf: () => LmsPolicy,
    speculation: SpeculationSettings = SPECULATION_OFF,
  ) {
    this.#policyOf = policyOf;
    this.speculation = speculation;
    pager.enablePaging?.();
  }

  /** Page-outs of this device whose bytes are still on their way to the host. */
  get pageOutsInFlight(): number {
    return this.#inFlight.size;
  }

  /** True when a page-out was refused since the page-outs in flight last settled. */
  get refusedSinceSettled(): boolean {
    return this.#refusedSinceSettled;
  }

  /**
   * Note [Held bytes]: the bytes of device memory the live, unreclaimed storages under LMS hold, each counted at
   * its size when it was made or last paged in. Speculation reads it, and its high-water mark (`heldPeakBytes`: room
   * the device is known to have), to tell how much room a prefetch may take (Note [Prefetch room]); it never decides
   * a reclaim. Memory allocated outside LMS is not counted.
   */
  get heldBytes(): number {
    return this.#heldBytes;
  }

  /** The most bytes the storages under LMS held at once (Note [Held bytes]). */
  get heldPeakBytes(): number {
    return this.#heldPeakBytes;
  }

  /** A storage under LMS came to hold `bytes` of device memory (negative: gave them back). */
  held(bytes: number): void {
    this.#heldBytes += bytes;
    if (this.#heldBytes > this.#heldPeakBytes) this.#heldPeakBytes = this.#heldBytes;
  }

  /** A storage of `bytes` was made under LMS on this device (Note [Waiting for page-outs]). */
  made(bytes: number): void {
    this.#madeSincePin += bytes;
  }

  /**
   * The start of a `pinAsync` on this device: the bytes made since the last one count toward the most made between
   * two pins (Note [Waiting for page-outs]).
   */
  pinAsyncBegins(): void {
    if (this.#madeSincePin > this.#mostMadeBetweenPins) this.#mostMadeBetweenPins = this.#madeSincePin;
    this.#madeSincePin = 0;
  }

  /**
   * The bytes the program is expected to make on this device between the pins being made now and its next pin
   * (Note [Waiting for page-outs]): those of the learned sequence's makes there when it predicts, else the most
   * made between two `pinAsync`s so far.
   */
  expectedAllocationBytes(): number {
    const history = this.learner?.history;
    const predictor = history?.predictor ?? null;
    if (history === undefined || predictor === null) return this.#mostMadeBetweenPins;
    const kinds = predictor.kinds;
    const end = Math.min(predictor.length, history.position + EXPECTED_ALLOCATION_HORIZON);
    let i = history.position;
    while (i < end && kinds[i] === AccessKind.Pin) i++; // the pins being made now
    let bytes = 0;
    for (; i < end && kinds[i] !== AccessKind.Pin; i++) if (kinds[i] === AccessKind.Create) bytes += predictor.sizes[i]!;
    return bytes;
  }

  /**
   * Resolves once `bytes` more can be allocated or paged in without waiting for a page-out to land (Note [Waiting
   * for page-outs]), waiting for page-outs in flight, oldest first, until they fit or none is left; counts the wait
   * in `transfer_wait_ms` and `room_wait_ms`. Never rejects.
   */
  async waitForRoom(bytes: number): Promise<void> {
    if (this.#inFlight.size === 0) return;
    if (this.pager.pagingRoom === undefined) return this.settlePageOuts();
    let start: number | undefined;
    while (this.#inFlight.size > 0 && !this.#fits(bytes)) {
      start ??= performance.now();
      await this.#oldestPageOut();
    }
    if (start === undefined) return;
    this.#polledAt = performance.now(); // the event loop turned while waiting
    this.stats.waited(this.#polledAt - start, true);
  }

  /** Waits for the oldest page-out in flight to land or fail, counting the wait; at once when none is in flight. */
  async waitForOldestPageOut(): Promise<void> {
    if (this.#inFlight.size === 0) return;
    const start = performance.now();
    await this.#oldestPageOut();
    this.#polledAt = performance.now();
    this.stats.waited(this.#polledAt - start, true);
  }

  /**
   * Lets the event loop turn once, when page-outs are in flight and no wait of this device let it turn for
   * POLL_INTERVAL_MS, so that copies done on the device land (Note [Waiting for page-outs]); counts the time in
   * `transfer_poll_ms`.
   */
  async pollPageOuts(): Promise<void> {
    if (this.#inFlight.size === 0) return;
    const start = performance.now();
    if (start - this.#polledAt < POLL_INTERVAL_MS) return;
    await nextTurn();
    this.#polledAt = performance.now();
    this.stats.polled(this.#polledAt - start);
  }

  /**
   * True when a page-out of `bytes` started now leaves room for the bytes the program is expected to allocate
   * before its next pin (Note [Waiting for page-outs]), so that the next `pinAsync` need not wait for it: for a
   * speculative page-out, which may as well not start. True when the pager cannot tell.
   */
  roomForEarlyPageOut(bytes: number): boolean {
    const room = this.pager.pagingRoom?.();
    if (room === undefined) return true;
    const inFlightBytes = room.inFlightBytes + bytes;
    // Segments lose what staging in flight holds beyond the reserve (Note [Paging room] in core's Pager).
    const headroomBytes = room.headroomBytes - (Math.max(inFlightBytes, room.reserveBytes) - Math.max(room.inFlightBytes, room.reserveBytes));
    return fits({ inFlightBytes, reserveBytes: room.reserveBytes, headroomBytes }, this.expectedAllocationBytes());
  }

  /** True when `bytes` fit beside the page-outs in flight (Note [Paging room] in core's Pager). */
  #fits(bytes: number): boolean {
    return fits(this.pager.pagingRoom!(), bytes);
  }

  /** Resolves once the oldest page-out in flight landed or failed (the set keeps them in the order they started). */
  async #oldestPageOut(): Promise<void> {
    const oldest = this.#inFlight.values().next();
    if (oldest.done !== true) await oldest.value;
  }

  /** Counts a page-out in flight until its bytes landed or it failed. */
  trackPageOut(host: PageOut): void {
    if (host.bytes !== null) return;
    const done: Promise<unknown> = host.done.then(
      () => this.#inFlight.delete(done),
      () => this.#inFlight.delete(done),
    );
    this.#inFlight.add(done);
  }

  /** Notes a page-out the pager refused (Note [Page-outs the device refuses]). */
  pageOutRefused(): void {
    this.stats.pageOutRefused();
    this.#refusedSinceSettled = true;
  }

  /** Resolves once every page-out in flight has landed or failed, counting the wait in `transfer_wait_ms` and `room_wait_ms`; never rejects. */
  async settlePageOuts(): Promise<void> {
    this.#refusedSinceSettled = false;
    if (this.#inFlight.size === 0) return;
    const start = performance.now();
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
    this.#polledAt = performance.now();
    this.stats.waited(this.#polledAt - start, true);
  }

  /**
   * What learns the program's sequence of pins and acts on it (Note [Speculation]): present when speculation is
   * on or the policy reads predictions (`usesPredictions`), null otherwise.
   */
  get learner(): Speculation | null {
    if (this.#learner === undefined) {
      const learn = this.speculation.learn || this.policy.usesPredictions === true;
      this.#learner = learn ? new Speculation(this, this.speculation) : null;
    }
    return this.#learner;
  }

  /** The end of one iteration of the program's loop (LmsController#endIteration): learns it. */
  endIteration(): void {
    const learned = this.learner?.endIteration();
    this.stats.iteration(learned?.predicted ?? false, learned?.diverged ?? false);
  }

  get policy(): LmsPolicy {
    return this.#policyOf();
  }

  /** The storages reclaimed now (bytes in host memory, no device memory). */
  get reclaimedStorages(): ReadonlySet<StorageResidency> {
    return this.#reclaimed;
  }

  rememberReclaimed(lms: StorageResidency): void {
    this.#reclaimed.add(lms);
  }

  forgetReclaimed(lms: StorageResidency): void {
    this.#reclaimed.delete(lms);
  }

  /** Calls a policy hook; one that throws is reported as `listenerFailed` and changes nothing LMS did. */
  notifyPolicy(hook: 'onPin' | 'onUnpin' | 'onReclaim' | 'onRelease', storage: StorageImpl): void {
    const policy = this.policy;
    try {
      policy[hook]?.(storage);
    } catch (error) {
      this.#emitter.safeEmit('listenerFailed', { event: `policy.${hook}`, error });
    }
  }

  emitPagedOut(storage: StorageImpl, bytes: number, copied: boolean, address: number): void {
    if (this.#emitter.listenerCount('pagedOut') > 0) this.#emitter.safeEmit('pagedOut', { storage, bytes, copied, address });
  }

  emitPagedIn(storage: StorageImpl, bytes: number): void {
    if (this.#emitter.listenerCount('pagedIn') > 0) this.#emitter.safeEmit('pagedIn', { storage, bytes, address: storage.peekDataPtr().address });
  }

  /**
   * One reclaim step toward `bytes` (Note [Reclaim steps]); returns the bytes freed, 0 when nothing is inactive or
   * every page-out it needed was refused (Note [Page-outs the device refuses]: each refused storage is left out and
   * the step taken again).
   */
  reclaim(bytes: number, target?: ReclaimTarget): number {
    const refused = (this.#refused = new Set());
    try {
      for (;;) {
        const before = refused.size;
        const freed = this.#reclaimStep(bytes, target);
        if (freed > 0 || refused.size === before) return freed;
      }
    } finally {
      this.#refused = null;
    }
  }

  #reclaimStep(bytes: number, target: ReclaimTarget | undefined): number {
    const learner = this.learner;
    if (learner !== null && learner.reclaimFloor !== null) return this.#reclaimForPrefetch(learner, bytes, target);
    if (this.list.size === 0) return 0;
    const policy = this.policy;
    const request: ReclaimRequest = { device: this.device, bytes };
    const one = chooseOne(policy, request, this.candidates(target));
    if (one !== undefined) return this.#reclaimChosen('reclaim_one', [one]);
    const fragments = chooseFragments(policy, request, this.candidates(target));
    if (fragments.length > 0) return this.#reclaimChosen('reclaim_fragments', fragments);
    return this.#reclaimChosen('reclaim_all', [...this.candidates(undefined)]);
  }

  /** Reclaims every inactive storage the allocator placed (IBM's `reclaim_inactive`); returns the bytes freed. */
  reclaimAll(): number {
    return this.#reclaimChosen(null, [...this.candidates(undefined)]);
  }

  /**
   * The inactive storages that can be reclaimed for `target`, least recently unpinned first, with their predicted
   * next use when something is predicted.
   */
  *candidates(target: ReclaimTarget | undefined): Generator<ReclaimCandidate> {
    const learner = this.learner;
    const predicting = learner !== null && learner.history.predictor !== null;
    const refused = this.#refused;
    for (const lms of this.list) {
      if (refused !== null && refused.has(lms)) continue;
      const placement = this.inspector.describeBlock(lms.storage.peekDataPtr());
      if (placement === undefined) continue; // not the allocator's block (COW-shared, imported, empty): never reclaimed
      if (target !== undefined && (placement.small !== target.small || placement.kind !== target.kind || placement.stream !== target.stream)) continue;
      const candidate = { storage: lms.storage, placement, hasHostCopy: lms.hasHostCopy, hostCopyReady: lms.hostCopyReady, unpinnedAt: lms.unpinnedAt };
      if (!predicting) {
        yield candidate;
        continue;
      }
      yield { ...candidate, nextUse: learner.history.nextUse(lms)! };
    }
  }

  /**
   * A reclaim step while a prefetch makes room (Note [Speculation]): the policy chooses among all candidates, as
   * it would for a demand allocation, and its choice is reclaimed only when every storage in it is used later than
   * the prefetched one and is one the learned sequence reclaims anyway (`reclaimPredicted`); otherwise, or when
   * such storages cannot make the room, the prefetch is declined and nothing is reclaimed. So a prefetch changes
   * when the policy's victims leave, never which, and adds no page-out.
   */
  #reclaimForPrefetch(learner: Speculation, bytes: number, target: ReclaimTarget | undefined): number {
    const floor = learner.reclaimFloor!;
    const all = [...this.candidates(target)];
    let laterBytes = 0;
    for (const candidate of all) if (candidate.nextUse! > floor && (candidate.storage.lms as StorageResidency).reclaimPredicted) laterBytes += candidate.placement.size;
    learner.checkPrefetchRoom(bytes, laterBytes);
    const request: ReclaimRequest = { device: this.device, bytes };
    const policy = this.policy;
    const one = chooseOne(policy, request, all);
    const chosen = one !== undefined ? [one] : chooseFragments(policy, request, all);
    if (chosen.length === 0 || chosen.some((c) => c.nextUse === undefined || c.nextUse <= floor || !(c.storage.lms as StorageResidency).reclaimPredicted)) learner.decline();
    return this.#reclaimChosen(one !== undefined ? 'reclaim_one' : 'reclaim_fragments', chosen);
  }

  #reclaimChosen(step: AllocSource | null, chosen: readonly ReclaimCandidate[]): number {
    let freed = 0;
    for (const candidate of chosen) {
      const lms = candidate.storage.lms;
      // A policy may only choose among the candidates it was offered: inactive storages of this device.
      if (!(lms instanceof StorageResidency) || lms.lmsDevice !== this || !this.list.has(lms)) continue;
      const bytes = lms.reclaim();
      if (bytes === 0) this.#refused?.add(lms);
      freed += bytes;
    }
    if (freed > 0 && step !== null) this.lastStep = step;
    return freed;
  }
}

/**
 * LMS on one device, as a device service (Note [Device services] in core): `rt.service(Residency, 'webgpu:0')` once
 * `lms()` is registered and the device's allocator pages; the same object as `LmsController#device`. Its reclaim
 * list, statistics, events, and the reclaims the engine's out-of-memory chain asks of it.
 */
export type Residency = DeviceResidency;

/** Events of the learned sequence `expectedAllocationBytes` looks through for the next pin. */
const EXPECTED_ALLOCATION_HORIZON = 256;

/** Milliseconds between the event-loop turns `pollPageOuts` lets happen while page-outs are in flight. */
const POLL_INTERVAL_MS = 2;

/** True when `bytes` more can be allocated or paged in beside the page-outs in flight of `room` (Note [Paging room] in core's Pager). */
function fits(room: PagingRoom, bytes: number): boolean {
  return bytes <= room.headroomBytes || room.inFlightBytes + bytes - room.headroomBytes <= room.reserveBytes;
}

/** Resolves on a later turn of the event loop (a macrotask: where WebGPU delivers mapAsync), not a microtask. */
function nextTurn(): Promise<void> {
  const immediate = (globalThis as { setImmediate?: (callback: () => void) => unknown }).setImmediate;
  return new Promise((resolve) => (immediate === undefined ? setTimeout(resolve, 0) : immediate(resolve)));
}

export const Residency: Token<Residency> = Symbol('stowage.lms.Residency');
