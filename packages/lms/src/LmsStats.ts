/** How an allocation on an LMS device was served (IBM's `alloc_distribution`). */
export type AllocSource = 'freelist' | 'device_alloc' | 'reclaim_one' | 'reclaim_fragments' | 'reclaim_all' | 'device_alloc_retry';

export const ALLOC_SOURCES: readonly AllocSource[] = ['freelist', 'device_alloc', 'reclaim_one', 'reclaim_fragments', 'reclaim_all', 'device_alloc_retry'];

/** The `memoryStats()` keys of paging: transfers started and their bytes. */
export const PAGING_STAT_KEYS = ['page_out', 'page_out_bytes', 'page_in', 'page_in_bytes'] as const;

/** The `memoryStats()` keys of speculation (see {@link LmsStats}): counters, 0 while speculation is off. */
export const SPECULATION_STAT_KEYS = [
  'speculative_page_out',
  'speculative_page_out_bytes',
  'speculative_hits',
  'speculative_misses',
  'speculative_wasted_bytes',
  'prefetch',
  'prefetch_bytes',
  'prefetch_hits',
  'prefetch_wasted_bytes',
  'iterations',
  'iterations_predicted',
  'prediction_fallbacks',
  'page_in_predicted',
  'page_in_ready_before_use',
] as const;

/**
 * LMS statistics of one device, under IBM LMS's keys where it has them, merged into the allocator's
 * `memoryStats()`:
 * - `pinned.all.{current,peak,allocated,freed}`: storages pinned (active); `allocated` counts pins from zero,
 *   `freed` the last unpins. `pinned_bytes.all.*` the same in bytes.
 * - `reclaimed`, `reclaimed_bytes`: storages (and their bytes) reclaimed so far.
 * - `host_bytes.all.{current,peak}`: bytes held in host memory now: reclaimed storages' bytes and clean host copies.
 * - `alloc_distribution.<source>`: allocations by how they were served (see {@link AllocSource}).
 * - `page_out`, `page_out_bytes`, `page_in`, `page_in_bytes`: transfers started; a reclaim whose host copy was
 *   still valid pages nothing out. `page_out_refused`: page-outs the device refused for lack of room (WebGPU: the
 *   staging buffer would pass the budget; Note [Page-outs the device refuses] in Residency.ts).
 * - `transfer_wait_ms`: time the program waited for a transfer (`ready()`, `pinAsync`); `room_wait_ms`: the part
 *   of it `pinAsync` waited for page-outs in flight to give back the device memory they held (Note [Waiting for
 *   page-outs] in Residency.ts), the rest being waits for a storage's bytes to reach the host. `transfer_poll_ms`: time
 *   `pinAsync` let the event loop turn while page-outs were in flight, so that finished copies land (Note [Waiting
 *   for page-outs] in Residency.ts).
 * - `page_in_predicted`, `page_in_ready_before_use`: Note [Ready before use].
 * - With speculation on (`lms({ speculation })`, Note [Speculation]): `speculative_page_out(_bytes)`: page-outs
 *   started early, at an unpin, because the learned sequence says the storage is reclaimed before its next pin;
 *   `speculative_hits`: reclaims that found such a copy (they only freed); `speculative_misses`: reclaims that had to
 *   copy (nothing predicted them); `speculative_wasted_bytes`: speculative copies dropped (a write, a release)
 *   before any reclaim used them; `prefetch(_bytes)`: page-ins started ahead of a predicted pin;
 *   `prefetch_hits`: pins that found their storage prefetched; `prefetch_wasted_bytes`: prefetched bytes reclaimed
 *   again or released before that pin; `iterations`: iteration boundaries (`LmsController#endIteration`);
 *   `iterations_predicted`: iterations that followed a learned sequence to the end; `prediction_fallbacks`:
 *   iterations whose sequence left every learned one (prediction stopped there, learning went on).
 */
// Note [Ready before use]: a page-in hides its copy only when the bytes are where the pin needs them before the pin
// comes. `page_in_predicted` counts the pins from zero, made while the learned sequence predicts (Note
// [Speculation]), that found their storage prefetched or reclaimed; `page_in_ready_before_use` those of them whose
// bytes were ready: on the device (prefetched), or on the host when the pin was asked for, so the page-in started
// at once (a `pinAsync` that had to wait for the page-out to land counts as not ready). Their ratio per iteration
// is the share the bench reads (`pnpm bench:lms`).
export class LmsStats {
  #pinned = 0;
  #pinnedPeak = 0;
  #pinnedAllocated = 0;
  #pinnedFreed = 0;
  #pinnedBytes = 0;
  #pinnedBytesPeak = 0;
  #pinnedBytesAllocated = 0;
  #pinnedBytesFreed = 0;
  #reclaimed = 0;
  #reclaimedBytes = 0;
  #hostBytes = 0;
  #hostBytesPeak = 0;
  #pageOut = 0;
  #pageOutBytes = 0;
  #pageOutRefused = 0;
  #pageIn = 0;
  #pageInBytes = 0;
  #waitMs = 0;
  #speculativePageOut = 0;
  #speculativePageOutBytes = 0;
  #speculativeHits = 0;
  #speculativeMisses = 0;
  #speculativeWastedBytes = 0;
  #prefetch = 0;
  #prefetchBytes = 0;
  #prefetchHits = 0;
  #prefetchWastedBytes = 0;
  #iterations = 0;
  #iterationsPredicted = 0;
  #predictionFallbacks = 0;
  #pollMs = 0;
  #roomWaitMs = 0;
  #pageInPredicted = 0;
  #pageInReadyBeforeUse = 0;
  readonly #allocDistribution: Record<AllocSource, number> = { freelist: 0, device_alloc: 0, reclaim_one: 0, reclaim_fragments: 0, reclaim_all: 0, device_alloc_retry: 0 };

  /** Storages pinned now. */
  get pinned(): number {
    return this.#pinned;
  }

  /** Bytes of the storages pinned now. */
  get pinnedBytes(): number {
    return this.#pinnedBytes;
  }

  /** Storages reclaimed so far (Speculation reads it to tell whether a reclaim happened since it last looked). */
  get reclaimed(): number {
    return this.#reclaimed;
  }

  /** Bytes reclaimed so far. */
  get reclaimedBytes(): number {
    return this.#reclaimedBytes;
  }

  /** Bytes in host memory now: reclaimed storages' bytes and clean host copies. */
  get hostBytes(): number {
    return this.#hostBytes;
  }

  /** A storage's pin count went from zero to one. */
  pin(bytes: number): void {
    this.#pinned++;
    this.#pinnedAllocated++;
    if (this.#pinned > this.#pinnedPeak) this.#pinnedPeak = this.#pinned;
    this.#pinnedBytes += bytes;
    this.#pinnedBytesAllocated += bytes;
    if (this.#pinnedBytes > this.#pinnedBytesPeak) this.#pinnedBytesPeak = this.#pinnedBytes;
  }

  /** A storage's last pin ended (`bytes`: what its pin counted). */
  unpin(bytes: number): void {
    this.#pinned--;
    this.#pinnedFreed++;
    this.#pinnedBytes -= bytes;
    this.#pinnedBytesFreed += bytes;
  }

  /** An allocation on the device was served by `source`. */
  allocated(source: AllocSource): void {
    this.#allocDistribution[source]++;
  }

  /** A storage of `bytes` was reclaimed. */
  reclaim(bytes: number): void {
    this.#reclaimed++;
    this.#reclaimedBytes += bytes;
  }

  /** A page-out of `bytes` started (`speculative`: at an unpin, ahead of a predicted reclaim); its copy is host bytes. */
  pageOut(bytes: number, speculative: boolean): void {
    this.#pageOut++;
    this.#pageOutBytes += bytes;
    if (speculative) {
      this.#speculativePageOut++;
      this.#speculativePageOutBytes += bytes;
    }
    this.#hostBytes += bytes;
    if (this.#hostBytes > this.#hostBytesPeak) this.#hostBytesPeak = this.#hostBytes;
  }

  /** A host copy of `bytes` came from the caller (`StorageResidency#adoptHostCopy`): host bytes, no page-out. */
  hostCopyAdopted(bytes: number): void {
    this.#hostBytes += bytes;
    if (this.#hostBytes > this.#hostBytesPeak) this.#hostBytesPeak = this.#hostBytes;
  }

  /** The device refused a page-out for lack of room (Note [Page-outs the device refuses] in Residency.ts). */
  pageOutRefused(): void {
    this.#pageOutRefused++;
  }

  /** A page-in of `bytes` started (`prefetch`: ahead of a predicted pin). */
  pageIn(bytes: number, prefetch: boolean): void {
    this.#pageIn++;
    this.#pageInBytes += bytes;
    if (prefetch) {
      this.#prefetch++;
      this.#prefetchBytes += bytes;
    }
  }

  /** A host copy of `bytes` was dropped (`wasted`: a speculative copy no reclaim used). */
  dropHost(bytes: number, wasted: boolean): void {
    this.#hostBytes -= bytes;
    if (wasted) this.#speculativeWastedBytes += bytes;
  }

  /** A reclaim found a speculative copy ready (`hit`) or had to copy although speculation pages out (a miss). */
  speculation(hit: boolean): void {
    if (hit) this.#speculativeHits++;
    else this.#speculativeMisses++;
  }

  /** A pin found its storage prefetched. */
  prefetchHit(): void {
    this.#prefetchHits++;
  }

  /** A prefetched storage of `bytes` was reclaimed again or released before its pin. */
  prefetchWasted(bytes: number): void {
    this.#prefetchWastedBytes += bytes;
  }

  /** The program waited `ms` for a transfer (`forRoom`: for page-outs to give device memory back, not for bytes). */
  waited(ms: number, forRoom = false): void {
    this.#waitMs += ms;
    if (forRoom) this.#roomWaitMs += ms;
  }

  /** `pinAsync` let the event loop turn for `ms` while page-outs were in flight. */
  polled(ms: number): void {
    this.#pollMs += ms;
  }

  /** A pin from zero, while the sequence predicts, found its storage prefetched or reclaimed (Note [Ready before use]). */
  predictedPageIn(ready: boolean): void {
    this.#pageInPredicted++;
    if (ready) this.#pageInReadyBeforeUse++;
  }

  /** An iteration boundary; whether the iteration followed a learned sequence to the end, or left every one. */
  iteration(predicted: boolean, diverged: boolean): void {
    this.#iterations++;
    if (predicted) this.#iterationsPredicted++;
    if (diverged) this.#predictionFallbacks++;
  }

  resetPeaks(): void {
    this.#pinnedPeak = this.#pinned;
    this.#pinnedBytesPeak = this.#pinnedBytes;
    this.#hostBytesPeak = this.#hostBytes;
  }

  toRecord(): Record<string, number> {
    const record: Record<string, number> = {
      'pinned.all.current': this.#pinned,
      'pinned.all.peak': this.#pinnedPeak,
      'pinned.all.allocated': this.#pinnedAllocated,
      'pinned.all.freed': this.#pinnedFreed,
      'pinned_bytes.all.current': this.#pinnedBytes,
      'pinned_bytes.all.peak': this.#pinnedBytesPeak,
      'pinned_bytes.all.allocated': this.#pinnedBytesAllocated,
      'pinned_bytes.all.freed': this.#pinnedBytesFreed,
      reclaimed: this.#reclaimed,
      reclaimed_bytes: this.#reclaimedBytes,
      'host_bytes.all.current': this.#hostBytes,
      'host_bytes.all.peak': this.#hostBytesPeak,
      page_out: this.#pageOut,
      page_out_bytes: this.#pageOutBytes,
      page_out_refused: this.#pageOutRefused,
      page_in: this.#pageIn,
      page_in_bytes: this.#pageInBytes,
      transfer_wait_ms: this.#waitMs,
      transfer_poll_ms: this.#pollMs,
      room_wait_ms: this.#roomWaitMs,
      speculative_page_out: this.#speculativePageOut,
      speculative_page_out_bytes: this.#speculativePageOutBytes,
      speculative_hits: this.#speculativeHits,
      speculative_misses: this.#speculativeMisses,
      speculative_wasted_bytes: this.#speculativeWastedBytes,
      prefetch: this.#prefetch,
      prefetch_bytes: this.#prefetchBytes,
      prefetch_hits: this.#prefetchHits,
      prefetch_wasted_bytes: this.#prefetchWastedBytes,
      iterations: this.#iterations,
      iterations_predicted: this.#iterationsPredicted,
      prediction_fallbacks: this.#predictionFallbacks,
      page_in_predicted: this.#pageInPredicted,
      page_in_ready_before_use: this.#pageInReadyBeforeUse,
    };
    for (const source of ALLOC_SOURCES) record[`alloc_distribution.${source}`] = this.#allocDistribution[source];
    return record;
  }
}
