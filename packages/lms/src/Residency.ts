import type { BlockInspector, Device, Pager, StorageImpl, Token } from '@stowage/core';
import type { PageOut, ReclaimTarget } from '@stowage/core/plugin-kit';
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
 * the page-outs in flight (`settlePageOuts`) before its pins and after them (its page-ins' reclaims start some,
 * and the operation's allocations follow synchronously), and retries a pin that ran out of memory once they
 * landed. A storage released or rewritten while its page-out is in flight cancels it (`PageOut.cancel`): the
 * device's room comes back at once.
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

  /** Resolves once every page-out in flight has landed or failed, counting the wait in `transfer_wait_ms`; never rejects. */
  async settlePageOuts(): Promise<void> {
    this.#refusedSinceSettled = false;
    if (this.#inFlight.size === 0) return;
    const start = performance.now();
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
    this.stats.waited(performance.now() - start);
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

export const Residency: Token<Residency> = Symbol('stowage.lms.Residency');
