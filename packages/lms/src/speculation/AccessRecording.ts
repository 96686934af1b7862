/**
 * What happened to a storage, as the learned sequence records it: `Create` (an LMS storage was made), `Pin` (a pin
 * from zero: an operation began using it), `Unpin` (the last unpin: it became inactive), `Release`.
 */
export const AccessKind = Object.freeze({ Create: 0, Pin: 1, Unpin: 2, Release: 3 } as const);
export type AccessKind = (typeof AccessKind)[keyof typeof AccessKind];

/** A storage as a recording knows it: the object it was, and whether it was released in that iteration. */
export interface RecordedStorage<S> {
  readonly storage: S;
  released: boolean;
  /** The recording's event indices of its pins, ascending. */
  readonly pins: number[];
}

/**
 * One iteration's sequence of events (Note [Speculation] in Speculation.ts): each event's kind, the storage's
 * ordinal (its order of first appearance in the iteration) and size, and, for each unpin, whether the storage was
 * reclaimed before its next pin (set later, by the reclaim, even one in a following iteration).
 *
 * Invariants: kinds, ordinals, sizes and reclaimedAfter have one entry per event; storages[n] is the storage first
 * seen at ordinal n; each storage's `pins` are the indices of the Pin events with its ordinal.
 */
export class AccessRecording<S extends object> {
  readonly kinds: AccessKind[] = [];
  readonly ordinals: number[] = [];
  readonly sizes: number[] = [];
  /** Per event: 1 when it is an unpin after which the storage was reclaimed before its next pin. */
  readonly reclaimedAfter: number[] = [];
  readonly storages: RecordedStorage<S>[] = [];
  /** Events recorded when the iteration's last reclaim came (0: none came); a reclaim in a later iteration does not count. */
  lastReclaimAt = 0;
  readonly #ordinalOf = new Map<S, number>();
  /** pinnedAfter[i]: the bytes of the Pin events at index i and after; built on first use, for a finished recording. */
  #pinnedAfter: Float64Array | null = null;

  get length(): number {
    return this.kinds.length;
  }

  /** The ordinal `storage` had in this iteration; undefined when it did not appear. */
  ordinalOf(storage: S): number | undefined {
    return this.#ordinalOf.get(storage);
  }

  /** Gives `storage` the next ordinal; returns it. */
  addStorage(storage: S): number {
    const ordinal = this.storages.length;
    this.storages.push({ storage, released: false, pins: [] });
    this.#ordinalOf.set(storage, ordinal);
    return ordinal;
  }

  /**
   * The bytes the Pin events from `index` on pin, summed (a storage pinned twice counts twice). For a recording that
   * no longer grows (a predictor): the sums are taken once, at the first call.
   */
  pinnedBytesFrom(index: number): number {
    let after = this.#pinnedAfter;
    if (after === null || after.length !== this.kinds.length + 1) {
      after = new Float64Array(this.kinds.length + 1);
      for (let i = this.kinds.length - 1; i >= 0; i--) after[i] = after[i + 1]! + (this.kinds[i] === AccessKind.Pin ? this.sizes[i]! : 0);
      this.#pinnedAfter = after;
    }
    return index >= after.length ? 0 : after[Math.max(0, index)]!;
  }

  /** Appends an event; returns its index. */
  add(kind: AccessKind, ordinal: number, size: number): number {
    const index = this.kinds.length;
    this.kinds.push(kind);
    this.ordinals.push(ordinal);
    this.sizes.push(size);
    this.reclaimedAfter.push(0);
    if (kind === AccessKind.Pin) this.storages[ordinal]!.pins.push(index);
    else if (kind === AccessKind.Release) this.storages[ordinal]!.released = true;
    return index;
  }

  /** True when event `index` is the same event: kind, ordinal and size. */
  matches(index: number, kind: AccessKind, ordinal: number, size: number): boolean {
    return index < this.kinds.length && this.kinds[index] === kind && this.ordinals[index] === ordinal && this.sizes[index] === size;
  }

  /**
   * Events from `from` to the storage's next pin: the distance to the first Pin of `ordinal` at or after `from`.
   * When none is left in the iteration: a storage the iteration did not release is taken to come back at its first
   * pin of the next iteration (the loop repeats); one it released, or never pinned, is never used again (Infinity).
   */
  nextPinDistance(ordinal: number, from: number): number {
    const recorded = this.storages[ordinal];
    if (recorded === undefined) return Number.POSITIVE_INFINITY;
    const pins = recorded.pins;
    let lo = 0;
    let hi = pins.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (pins[mid]! < from) lo = mid + 1;
      else hi = mid;
    }
    if (lo < pins.length) return pins[lo]! - from;
    if (recorded.released || pins.length === 0) return Number.POSITIVE_INFINITY;
    return this.length - from + pins[0]!;
  }
}
