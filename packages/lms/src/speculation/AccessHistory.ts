import { AccessKind, AccessRecording } from './AccessRecording.js';

/**
 * Events one iteration may record (a few arrays of small integers: about 40 bytes an event): a training step of
 * thousands of operations records tens of thousands; a program that never marks its iterations stops recording here.
 */
export const DEFAULT_MAX_EVENTS = 1 << 20;

/** What the history keeps on each storage (StorageResidency carries these fields). */
export interface LearnedStorage {
  /** The iteration in which `ordinal` was given; -1 before any. */
  seenIteration: number;
  /** Its order of first appearance in iteration `seenIteration`. */
  ordinal: number;
  /** The recording and event index of its last unpin, for the reclaim bit; null before any. */
  lastUnpin: AccessRecording<LearnedStorage> | null;
  lastUnpinIndex: number;
  readonly byteLength: number;
}

/**
 * The program's sequence of storage events, learned iteration by iteration, and predictions from it (Note
 * [Speculation] in Speculation.ts).
 *
 * - Storages are named by ordinal: their order of first appearance in the iteration. The same tensor at the same
 *   point of a repeated loop gets the same ordinal; a persistent storage (a weight) is also recognised as the same
 *   object.
 * - Up to `capacity` past recordings are kept, most recent first. Each event of the current iteration is compared
 *   with the event at the same index of every recording still matching; those that differ drop out. The first one
 *   left predicts; when none is left, nothing is predicted until the next iteration.
 * - At the iteration's end, the recording it matched to the end is replaced by this iteration's, at the front (the
 *   same sequence, fresher objects and reclaim bits); otherwise this iteration's joins the front and the oldest beyond `capacity`
 *   is forgotten. So a loop that cycles through a few shapes (sequence lengths) is predicted from the second time
 *   each shape comes round.
 *
 * Invariants: `#candidates` are recordings of `#past` that equal `#current` on every event so far; `predictor` is
 * `#candidates[0]` or null.
 */
export class AccessHistory<S extends LearnedStorage> {
  #iteration = 0;
  #current = new AccessRecording<LearnedStorage>();
  #past: AccessRecording<LearnedStorage>[] = [];
  #candidates: AccessRecording<LearnedStorage>[] = [];
  /** True once this iteration left every recording (counted once per iteration). */
  #diverged = false;

  constructor(
    /** Recordings kept. */
    readonly capacity: number,
    /** Events one iteration may record; past it, the iteration is neither learned nor predicted. */
    readonly maxEvents: number = DEFAULT_MAX_EVENTS,
  ) {}

  /** The recording that predicts this iteration, or null. */
  get predictor(): AccessRecording<LearnedStorage> | null {
    return this.#candidates[0] ?? null;
  }

  /** Events recorded in this iteration so far: the index of the next. */
  get position(): number {
    return this.#current.length;
  }

  get iteration(): number {
    return this.#iteration;
  }

  /**
   * Records one event of `storage`; returns its index in this iteration, or -1 when the iteration has grown past
   * `maxEvents` (a program that does not mark its iterations): it is then neither recorded nor predicted.
   */
  record(kind: AccessKind, storage: S): number {
    const current = this.#current;
    if (current.length >= this.maxEvents) {
      if (this.#candidates.length > 0) this.#candidates = [];
      return -1;
    }
    if (storage.seenIteration !== this.#iteration) {
      storage.seenIteration = this.#iteration;
      storage.ordinal = current.addStorage(storage);
    }
    const ordinal = storage.ordinal;
    const size = storage.byteLength;
    const index = current.add(kind, ordinal, size);
    const candidates = this.#candidates;
    for (let i = 0; i < candidates.length; i++) {
      if (candidates[i]!.matches(index, kind, ordinal, size)) continue;
      this.#candidates = candidates.filter((c) => c.matches(index, kind, ordinal, size));
      if (this.#candidates.length === 0) this.#diverged = true;
      break;
    }
    if (kind === AccessKind.Unpin) {
      storage.lastUnpin = current;
      storage.lastUnpinIndex = index;
    }
    return index;
  }

  /** `storage` was reclaimed: the unpin before it is marked reclaimed, in whichever recording it is. */
  recordReclaim(storage: S): void {
    const recording = storage.lastUnpin;
    if (recording !== null) recording.reclaimedAfter[storage.lastUnpinIndex] = 1;
    this.#current.lastReclaimAt = this.#current.length;
  }

  /**
   * True when the predictor's iteration reclaimed something after its event `index`, or when nothing is predicted;
   * false when its last reclaim came before that event (Note [Page-outs past the last reclaim] in Speculation.ts).
   */
  predictsReclaimLater(index: number): boolean {
    const predictor = this.predictor;
    return predictor === null || predictor.lastReclaimAt > index;
  }

  /** The bytes the predictor's iteration pins after its event `index` (pins counted each time); 0 when nothing is predicted. */
  pinnedBytesAfter(index: number): number {
    return this.predictor?.pinnedBytesFrom(index + 1) ?? 0;
  }

  /** True when the predictor's event `index` (this iteration's matched event) is an unpin followed by a reclaim. */
  predictsReclaimAfter(index: number): boolean {
    const predictor = this.predictor;
    return predictor !== null && predictor.reclaimedAfter[index] === 1;
  }

  /**
   * Events until `storage`'s next predicted pin (Infinity: none predicted); undefined when nothing is predicted.
   * A storage not seen yet in this iteration is looked up as the object the predictor saw (a persistent one).
   */
  nextUse(storage: S): number | undefined {
    const predictor = this.predictor;
    if (predictor === null) return undefined;
    const ordinal = storage.seenIteration === this.#iteration ? storage.ordinal : predictor.ordinalOf(storage);
    if (ordinal === undefined) return Number.POSITIVE_INFINITY;
    return predictor.nextPinDistance(ordinal, this.#current.length);
  }

  /**
   * The storage the predictor's event `index` names, as it exists now: the one given that ordinal in this
   * iteration, or, for an ordinal not reached yet, the predictor's own object when it outlived its iteration (a
   * persistent storage); undefined when it does not exist yet.
   */
  storageAt(index: number): S | undefined {
    const predictor = this.predictor;
    if (predictor === null || index >= predictor.length) return undefined;
    const ordinal = predictor.ordinals[index]!;
    const seen = this.#current.storages[ordinal];
    if (seen !== undefined) return seen.storage as S;
    const recorded = predictor.storages[ordinal]!;
    return recorded.released ? undefined : (recorded.storage as S);
  }

  /**
   * Ends the iteration (see the class comment); returns whether it followed a recording to the end, and whether it
   * left every recording on the way.
   */
  endIteration(): { readonly predicted: boolean; readonly diverged: boolean } {
    const current = this.#current;
    const matched = this.#candidates.find((c) => c.length === current.length);
    const result = { predicted: matched !== undefined, diverged: this.#diverged };
    if (matched !== undefined) this.#past = [current, ...this.#past.filter((r) => r !== matched)];
    else if (current.length > 0 && current.length < this.maxEvents) this.#past = [current, ...this.#past].slice(0, this.capacity);
    this.#current = new AccessRecording<LearnedStorage>();
    this.#candidates = [...this.#past];
    this.#diverged = false;
    this.#iteration++;
    return result;
  }
}
