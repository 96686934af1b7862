import type { Device, StorageImpl, Token } from '@stowage/core';
import { InvalidArgumentError, StowageError } from '@stowage/core';
import type { BlockPlacement } from '@stowage/core/plugin-kit';

/** What a reclaim must free room for. */
export interface ReclaimRequest {
  readonly device: Device;
  /** The request's size, rounded as the caching engine rounds it. */
  readonly bytes: number;
}

/**
 * An inactive storage that may be reclaimed, as a policy sees it: its block's place in its segment (size, address
 * and the free bytes beside it), whether a complete host copy already exists (then reclaiming it copies nothing),
 * and when it was last unpinned.
 */
export interface ReclaimCandidate {
  readonly storage: StorageImpl;
  readonly placement: BlockPlacement;
  /**
   * True when a host copy of the storage's bytes exists and is still valid (complete, or on its way to host memory):
   * reclaiming it copies nothing, only frees.
   */
  readonly hasHostCopy: boolean;
  /** True when that host copy is complete: bringing the storage back can start at once (WebGPU: no wait for mapAsync). */
  readonly hostCopyReady: boolean;
  /** The controller's unpin count when this storage was last unpinned (larger is more recent). */
  readonly unpinnedAt: number;
  /**
   * How far ahead its next pin is predicted, in pins and unpins of the learned sequence (Note [Speculation]):
   * `Infinity` when the sequence has no further pin of it; undefined when nothing is predicted (speculation off and
   * no policy asked for predictions, or the current iteration has left every learned sequence).
   */
  readonly nextUse?: number;
}

/**
 * Chooses which inactive storages to reclaim when the caching engine has no room (DESIGN.md "LMS"). The controller
 * asks in IBM's order, one step per call, and lets the engine retry after each: `chooseOne` (reclaim_one), then
 * `chooseFragments` (reclaim_fragments), then everything inactive (reclaim_all, which no policy chooses). It passes
 * only candidates whose freed block can serve the request (same pool, segment kind and stream), in reclaim-list
 * order: least recently unpinned first. A policy keeps whatever history it wants through the optional hooks.
 *
 * Swap it with one registration: `container.register(LmsPolicy, { useClass: MyPolicy })` in a plugin after
 * `lms()`, or `lms({ policy: new MyPolicy() })`.
 */
export interface LmsPolicy {
  readonly name: string;
  /**
   * One storage whose block, merged with the free bytes beside it, holds the request; undefined when none does.
   * The candidates iterable may be walked once, partly or not at all.
   */
  chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined;
  /** Storages whose freed blocks together make room for the request; empty when none would. */
  chooseFragments(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[];
  /** A storage was pinned (its pin count went from zero to one). */
  onPin?(storage: StorageImpl): void;
  /** A storage's last pin ended: it is inactive now. */
  onUnpin?(storage: StorageImpl): void;
  /** A storage was reclaimed. */
  onReclaim?(storage: StorageImpl): void;
  /** A storage under LMS was released. */
  onRelease?(storage: StorageImpl): void;
  /**
   * True when the policy reads `ReclaimCandidate.nextUse`: LMS then learns the program's sequence of pins (Note
   * [Speculation]) even with speculation off.
   */
  readonly usesPredictions?: boolean;
}

/** The policy LMS asks; `lms()` registers `lru` unless told otherwise. */
export const LmsPolicy: Token<LmsPolicy> = Symbol('stowage.LmsPolicy');

/**
 * `value` as an LmsPolicy: an object with `chooseOne` and `chooseFragments` functions (and, if present, hooks that are
 * functions). `argument` names it in the error.
 * @throws InvalidArgumentError otherwise
 */
export function checkPolicy(argument: string, value: unknown): LmsPolicy {
  const p = value as Partial<Record<keyof LmsPolicy, unknown>> | null;
  const hooks = ['onPin', 'onUnpin', 'onReclaim', 'onRelease'] as const;
  if (typeof p !== 'object' || p === null || typeof p.chooseOne !== 'function' || typeof p.chooseFragments !== 'function' || hooks.some((h) => p[h] !== undefined && typeof p[h] !== 'function')) {
    throw new InvalidArgumentError(argument, value, 'a policy name or an LmsPolicy (an object with chooseOne and chooseFragments; onPin, onUnpin, onReclaim and onRelease, when given, are functions)');
  }
  return value as LmsPolicy;
}

/**
 * The policy's `chooseOne`, its answer checked: a candidate (an object with a storage) or undefined.
 * @throws InvalidArgumentError naming the policy when it returns anything else or throws (the error its cause); a
 * StowageError it throws passes as is. Nothing was reclaimed.
 */
export function chooseOne(policy: LmsPolicy, request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
  const chosen = ask(policy, 'chooseOne', () => policy.chooseOne(request, candidates));
  if (chosen === undefined || isCandidateLike(chosen)) return chosen as ReclaimCandidate | undefined;
  throw new InvalidArgumentError(`the LMS policy '${String(policy.name)}': chooseOne()`, chosen, 'one of the ReclaimCandidates it was offered, or undefined');
}

/**
 * The policy's `chooseFragments`, its answer checked: an array of candidates.
 * @throws as {@link chooseOne}
 */
export function chooseFragments(policy: LmsPolicy, request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[] {
  const chosen = ask(policy, 'chooseFragments', () => policy.chooseFragments(request, candidates));
  if (Array.isArray(chosen) && chosen.every(isCandidateLike)) return chosen as ReclaimCandidate[];
  throw new InvalidArgumentError(`the LMS policy '${String(policy.name)}': chooseFragments()`, chosen, 'an array of the ReclaimCandidates it was offered (empty for none)');
}

/** What `choose` returned; a failure of the policy's own code becomes an InvalidArgumentError naming it. */
function ask(policy: LmsPolicy, method: string, choose: () => unknown): unknown {
  try {
    return choose();
  } catch (error) {
    if (error instanceof StowageError) throw error;
    const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    throw new InvalidArgumentError(`the LMS policy '${String(policy.name)}': ${method}()`, `a throw (${what})`, 'a function that returns its choice; fix the policy', { cause: error });
  }
}

function isCandidateLike(value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof (value as { storage?: unknown }).storage === 'object' && (value as { storage?: unknown }).storage !== null;
}
