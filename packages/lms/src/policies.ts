import type { LmsPolicy, ReclaimCandidate, ReclaimRequest } from './LmsPolicy.js';

/** The bytes a candidate's block gives once freed: itself and the free blocks it merges with. */
export function freedRun(candidate: ReclaimCandidate): number {
  const p = candidate.placement;
  return p.freeBefore + p.size + p.freeAfter;
}

/**
 * IBM LMS's policy (`reclaim-algo=first`): reclaim_one takes the least recently unpinned storage whose block, with
 * the free bytes beside it, holds the request; reclaim_fragments takes every inactive storage in a segment large
 * enough for the request (IBM pages them all out, then lets the cache coalesce).
 */
export class LruPolicy implements LmsPolicy {
  readonly name: string = 'lru';

  chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
    for (const candidate of candidates) if (freedRun(candidate) >= request.bytes) return candidate;
    return undefined;
  }

  chooseFragments(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[] {
    const chosen: ReclaimCandidate[] = [];
    for (const candidate of candidates) if (candidate.placement.segmentBytes >= request.bytes) chosen.push(candidate);
    return chosen;
  }
}

/**
 * Best fit by cost, size and adjacency: reclaim_one takes, among the storages whose freed run holds the request,
 * the one that copies the fewest bytes out (none when a valid host copy exists), then the smallest, then the least
 * recently unpinned; reclaim_fragments takes the fewest bytes of adjacent storages whose blocks, with the free
 * bytes between and beside them, make one run that holds the request. Each step pages out no more than `lru`'s
 * step would. Over a whole run that bounds nothing: the bytes paged back in depend on when each victim is needed
 * next, which no policy without a prediction of the next uses can see (`pnpm bench:lms` reports both).
 */
export class BestFitPolicy implements LmsPolicy {
  readonly name: string = 'best-fit';

  chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
    return bestHolding(request, candidates, better);
  }

  chooseFragments(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[] {
    return smallestAdjacentRun(request.bytes, candidates);
  }
}

/**
 * The candidate that `isBetter` ranks first among those that make room for the request: whose freed run holds it,
 * or, with `segmentRoom`, whose reclaim frees its whole segment; undefined when none does.
 */
function bestHolding(
  request: ReclaimRequest,
  candidates: Iterable<ReclaimCandidate>,
  isBetter: (a: ReclaimCandidate, b: ReclaimCandidate) => boolean,
  segmentRoom = false,
): ReclaimCandidate | undefined {
  let best: ReclaimCandidate | undefined;
  for (const candidate of candidates) {
    if (freedRun(candidate) < request.bytes && !(segmentRoom && freesSegment(candidate))) continue;
    if (best === undefined || isBetter(candidate, best)) best = candidate;
  }
  return best;
}

/** Fewer bytes to copy out first (none with a valid host copy); then the smaller block; then the least recently unpinned. */
function better(a: ReclaimCandidate, b: ReclaimCandidate): boolean {
  const costA = a.hasHostCopy ? 0 : a.placement.size;
  const costB = b.hasHostCopy ? 0 : b.placement.size;
  if (costA !== costB) return costA < costB;
  if (a.placement.size !== b.placement.size) return a.placement.size < b.placement.size;
  return a.unpinnedAt < b.unpinnedAt;
}

/**
 * The run of address-adjacent candidates (adjacent: only free bytes between them) in one segment that frees a
 * contiguous range of at least `bytes` while reclaiming the fewest bytes; empty when no run does. A sliding window
 * over each segment's candidates in address order: O(n log n).
 */
export function smallestAdjacentRun(bytes: number, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate[] {
  let best: ReclaimCandidate[] = [];
  let bestCost = Number.POSITIVE_INFINITY;
  for (const list of bySegmentInAddressOrder(candidates)) {
    let start = 0;
    let cost = 0; // bytes reclaimed in the window [start, end]
    for (let end = 0; end < list.length; end++) {
      const p = list[end]!.placement;
      if (end > start && !adjacent(list[end - 1]!, list[end]!)) {
        start = end;
        cost = 0;
      }
      cost += p.size;
      // Shrink from the left while the window still holds the request.
      while (start < end && run(list, start + 1, end) >= bytes) {
        cost -= list[start]!.placement.size;
        start++;
      }
      if (run(list, start, end) >= bytes && cost < bestCost) {
        bestCost = cost;
        best = list.slice(start, end + 1);
      }
    }
  }
  return best;
}

/** The candidates grouped by segment, each group in address order. */
function bySegmentInAddressOrder(candidates: Iterable<ReclaimCandidate>): ReclaimCandidate[][] {
  const bySegment = new Map<number, ReclaimCandidate[]>();
  for (const candidate of candidates) {
    const list = bySegment.get(candidate.placement.segment);
    if (list) list.push(candidate);
    else bySegment.set(candidate.placement.segment, [candidate]);
  }
  const groups = [...bySegment.values()];
  for (const list of groups) list.sort((a, b) => a.placement.address - b.placement.address);
  return groups;
}

/** True when only free bytes lie between `a` and `b` (a before b). */
function adjacent(a: ReclaimCandidate, b: ReclaimCandidate): boolean {
  return a.placement.address + a.placement.size + a.placement.freeAfter === b.placement.address;
}

/** The contiguous bytes freed by reclaiming list[start..end] (adjacent candidates). */
function run(list: readonly ReclaimCandidate[], start: number, end: number): number {
  const first = list[start]!.placement;
  const last = list[end]!.placement;
  return last.address + last.size + last.freeAfter - (first.address - first.freeBefore);
}

/**
 * The learned policy: victims by predicted next use, the farthest first, as Belady-MIN chooses with perfect
 * knowledge (Note [Speculation] in speculation/Speculation.ts says where the predictions come from). reclaim_one
 * takes, among the storages whose freed run holds the request or whose reclaim frees their whole segment, the one
 * whose next pin is farthest ahead; ties go to the one that copies nothing out (a valid host copy), then to the
 * least recently unpinned. A freed segment, however small, is room: the engine releases it, giving its bytes back to
 * the budget, and asks again until there is enough. So with one segment per allocation (`segmentSize: (r) => r,
 * splitBlocks: false`) victims leave in Belady's order, whatever their sizes. reclaim_fragments takes
 * the run of adjacent storages that frees room for the request and whose nearest next use is farthest; ties go to
 * the fewest bytes. Where nothing is predicted (the first iteration, or one that left every learned sequence) it
 * chooses as `lru` does.
 */
export class SpeculativePolicy implements LmsPolicy {
  readonly name: string = 'speculative';
  readonly usesPredictions = true;
  readonly #lru = new LruPolicy();

  chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
    const all = [...candidates];
    if (all.some((c) => c.nextUse === undefined)) return this.#lru.chooseOne(request, all);
    return bestHolding(request, all, fartherUse, true);
  }

  chooseFragments(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[] {
    const all = [...candidates];
    if (all.some((c) => c.nextUse === undefined)) return this.#lru.chooseFragments(request, all);
    return latestUsedAdjacentRun(request.bytes, all);
  }
}

/**
 * True when reclaiming the candidate leaves its whole segment free: the engine can then release the segment and
 * reserve one for the request in the budget room it gives back, however small the candidate.
 */
function freesSegment(candidate: ReclaimCandidate): boolean {
  return freedRun(candidate) === candidate.placement.segmentBytes;
}

/** Farther predicted next use first; then nothing to copy out; then the least recently unpinned. */
function fartherUse(a: ReclaimCandidate, b: ReclaimCandidate): boolean {
  if (a.nextUse !== b.nextUse) return a.nextUse! > b.nextUse!;
  if (a.hasHostCopy !== b.hasHostCopy) return a.hasHostCopy;
  return a.unpinnedAt < b.unpinnedAt;
}

/**
 * The shortest runs of address-adjacent candidates in one segment that free at least `bytes` together, scored by
 * the nearest predicted next use among them: the run whose nearest use is farthest, ties to the fewest bytes
 * reclaimed; empty when no run frees enough. O(n × run length).
 */
function latestUsedAdjacentRun(bytes: number, candidates: readonly ReclaimCandidate[]): ReclaimCandidate[] {
  let best: ReclaimCandidate[] = [];
  let bestUse = Number.NEGATIVE_INFINITY;
  let bestCost = Number.POSITIVE_INFINITY;
  for (const list of bySegmentInAddressOrder(candidates)) {
    for (let start = 0; start < list.length; start++) {
      let nearest = Number.POSITIVE_INFINITY;
      let cost = 0;
      for (let end = start; end < list.length; end++) {
        if (end > start && !adjacent(list[end - 1]!, list[end]!)) break;
        nearest = Math.min(nearest, list[end]!.nextUse!);
        cost += list[end]!.placement.size;
        if (run(list, start, end) < bytes) continue;
        if (nearest > bestUse || (nearest === bestUse && cost < bestCost)) {
          bestUse = nearest;
          bestCost = cost;
          best = list.slice(start, end + 1);
        }
        break; // a longer run from this start only adds nearer uses and bytes
      }
    }
  }
  return best;
}

/** The built-in policies by name. */
export const BUILT_IN_POLICIES = { lru: LruPolicy, 'best-fit': BestFitPolicy, speculative: SpeculativePolicy } as const;
export type BuiltInPolicyName = keyof typeof BUILT_IN_POLICIES;
