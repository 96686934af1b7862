import type { TensorInfo } from '@tensorflow/tfjs-core';
import { engine } from '@tensorflow/tfjs-core';
import { StorageImpl } from '@stowage/core';
import type { LmsPolicy, ReclaimCandidate, ReclaimRequest } from '@stowage/lms';
import { freedRun } from '@stowage/lms';

/** Storages this small (a scalar, a block of the engine) are never taken as looking dead: constants read again and again. */
const SMALL_BYTES = 512;

/** What the tfjs backend knows of a step's tensors, for reclaims in a step LMS does not predict. */
export interface StepHints {
  /** Whether a kernel has read the storage since the kernel (or upload) that wrote it. */
  readSinceWritten(storage: StorageImpl): boolean;
  /** The storages tfjs's active gradient tape saved for the backward pass (empty outside `tf.grads` and the like). */
  savedForBackward(): ReadonlySet<StorageImpl>;
}

/**
 * The Stowage backend's `StepHints`: the storages a kernel read since they were written (`readSinceWritten`), and
 * those tfjs's active gradient tape saved (each saved tensor's resource, by `resourceOf` its data id).
 */
export function tfjsStepHints(readSinceWritten: WeakSet<StorageImpl>, resourceOf: (dataId: object) => unknown): StepHints {
  return {
    readSinceWritten: (storage) => readSinceWritten.has(storage),
    savedForBackward: () => {
      const saved = new Set<StorageImpl>();
      const tape = (engine() as unknown as { state: { activeTape: { saved?: TensorInfo[] }[] | null } }).state.activeTape;
      for (const node of tape ?? []) {
        for (const tensor of node.saved ?? []) {
          const resource = resourceOf(tensor.dataId);
          if (resource instanceof StorageImpl) saved.add(resource);
        }
      }
      return saved;
    },
  };
}

/**
 * How safe reclaiming a candidate is inside a synchronous tfjs step (Note [LMS inside a synchronous step] in
 * KernelPins.ts), smaller is safer:
 * - 0: its host copy is complete: reclaiming only frees the block, and a page-in is a `writeBuffer` of host bytes
 *   that can start at once;
 * - 1: no complete copy, but the learned sequence pins it no more this step (`nextUse` Infinity): its page-out
 *   lands by the next async point, before it is needed;
 * - 2: nothing predicted, and it looks dead: read by a kernel since it was written, not saved for backward, and
 *   larger than one block (a temporary that tfjs frees only at the end of its `tidy`; small ones are mostly
 *   constants, read again and again) — a guess, which can be wrong;
 * - 3: anything else (a next use predicted in this step, written and not read yet, or saved for backward on tfjs's
 *   active gradient tape, whatever the prediction): a page-in before the event loop runs would find its bytes in
 *   flight.
 */
export function stepRisk(candidate: ReclaimCandidate, hints: StepHints | null = null, saved?: ReadonlySet<StorageImpl>): 0 | 1 | 2 | 3 {
  if (candidate.hostCopyReady) return 0;
  if (hints !== null && (saved ?? hints.savedForBackward()).has(candidate.storage)) return 3;
  if (candidate.nextUse === Number.POSITIVE_INFINITY) return 1;
  if (candidate.nextUse !== undefined || hints === null) return 3;
  return hints.readSinceWritten(candidate.storage) && candidate.storage.byteLength > SMALL_BYTES ? 2 : 3;
}

/**
 * LMS's policy for tfjs steps on WebGPU: reclaims by `stepRisk` first; within a risk, the farthest predicted next
 * use (Belady's rule on the learned sequence), then the least recently unpinned (activations saved early are
 * needed last in backward; of the temporaries that look dead, the oldest are the likeliest to be). reclaim_one takes the best candidate whose freed run holds the request
 * or whose reclaim frees its whole segment (room the engine gives back to the budget), unless a safer candidate
 * (a lower risk) exists, whose run does not hold it; reclaim_fragments takes the
 * best candidates of the safest risk present, in that order, until their blocks add up to the request. So a storage whose bytes would still
 * be in flight when the step needs it again is reclaimed only when nothing safer makes room.
 *
 * The Stowage backend gives the policy its `StepHints` (`attach`) when it is made on a runtime whose LMS uses it.
 */
export class SynchronousStepPolicy implements LmsPolicy {
  readonly name: string = 'tfjs-step';
  /** LMS learns the loop's pins for it (Note [Speculation] in @stowage/lms), with or without speculation. */
  readonly usesPredictions = true;
  #hints: StepHints | null = null;

  /** Reads `hints` from now on (the latest backend's; null: none). */
  attach(hints: StepHints | null): void {
    this.#hints = hints;
  }

  chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
    const { rank, risk } = this.#ranker();
    let best: ReclaimCandidate | undefined;
    let safest = Number.POSITIVE_INFINITY;
    for (const candidate of candidates) {
      safest = Math.min(safest, risk(candidate));
      const run = freedRun(candidate);
      if (run < request.bytes && run < candidate.placement.segmentBytes) continue;
      if (best === undefined || rank(candidate, best) < 0) best = candidate;
    }
    // A riskier storage only once no safer one is left: reclaim_fragments frees the safer ones first (their blocks
    // merge, or empty their segment, which the engine gives back to the budget).
    return best !== undefined && risk(best) <= safest ? best : undefined;
  }

  chooseFragments(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[] {
    const { rank, risk } = this.#ranker();
    const ranked = [...candidates].sort(rank);
    const chosen: ReclaimCandidate[] = [];
    let bytes = 0;
    for (const candidate of ranked) {
      // Only the safest risk present: if they do not make the room, the engine asks again and the next step
      // takes the next risk (by reclaim_one first).
      if (bytes >= request.bytes || (chosen.length > 0 && risk(candidate) > risk(chosen[0]!))) break;
      chosen.push(candidate);
      bytes += candidate.placement.size;
    }
    return chosen;
  }

  /**
   * A comparison, negative when `a` is reclaimed before `b`, and each candidate's `stepRisk`, for one reclaim step
   * (the tape read once).
   */
  #ranker(): { rank: (a: ReclaimCandidate, b: ReclaimCandidate) => number; risk: (c: ReclaimCandidate) => number } {
    const hints = this.#hints;
    let saved: ReadonlySet<StorageImpl> | undefined;
    const risks = new Map<ReclaimCandidate, number>();
    const riskOf = (c: ReclaimCandidate): number => {
      let risk = risks.get(c);
      if (risk === undefined) risks.set(c, (risk = stepRisk(c, hints, (saved ??= hints?.savedForBackward()))));
      return risk;
    };
    const rank = (a: ReclaimCandidate, b: ReclaimCandidate): number => {
      const riskA = riskOf(a);
      const riskB = riskOf(b);
      if (riskA !== riskB) return riskA - riskB;
      const nextA = a.nextUse ?? 0;
      const nextB = b.nextUse ?? 0;
      if (nextA !== nextB) return nextB - nextA > 0 ? 1 : -1;
      return a.unpinnedAt - b.unpinnedAt;
    };
    return { rank, risk: riskOf };
  }
}
