/**
 * The physical allocations mapped in one expandable segment, by offset (Note [Page runs] in ExpandableSegments.ts).
 *
 * Invariants: `#starts` ascends; `#ends[i] > #starts[i]` and `#ends[i] <= #starts[i + 1]` (runs never overlap).
 */
export class PageRuns {
  readonly #starts: number[] = [];
  readonly #ends: number[] = [];

  /** Number of physical allocations mapped. */
  get count(): number {
    return this.#starts.length;
  }

  /** Records allocations of `runBytes` each over `[start, end)` (offsets in the segment); the range was unmapped. */
  add(start: number, end: number, runBytes: number): void {
    const at = this.#firstStartAtLeast(start);
    const starts: number[] = [];
    const ends: number[] = [];
    for (let s = start; s < end; s += runBytes) {
      starts.push(s);
      ends.push(Math.min(end, s + runBytes));
    }
    this.#starts.splice(at, 0, ...starts);
    this.#ends.splice(at, 0, ...ends);
  }

  /**
   * The allocations lying wholly inside `[from, to)`, a mapped range: they are contiguous, from the first that starts
   * at or after `from` to the last that ends at or before `to`. Undefined when none does.
   */
  inside(from: number, to: number): { readonly start: number; readonly end: number } | undefined {
    const first = this.#firstStartAtLeast(from);
    let last = first - 1;
    while (last + 1 < this.#starts.length && this.#ends[last + 1]! <= to) last++;
    return last < first ? undefined : { start: this.#starts[first]!, end: this.#ends[last]! };
  }

  /** Forgets the allocations over `[start, end)`, which starts and ends on allocation boundaries. */
  remove(start: number, end: number): void {
    const first = this.#firstStartAtLeast(start);
    let last = first;
    while (last < this.#starts.length && this.#ends[last]! <= end) last++;
    this.#starts.splice(first, last - first);
    this.#ends.splice(first, last - first);
  }

  /** Whether `offset` is where an allocation starts or ends (or no allocation covers it). */
  isBoundary(offset: number): boolean {
    const at = this.#firstStartAtLeast(offset);
    if (this.#starts[at] === offset) return true;
    return at === 0 || this.#ends[at - 1]! <= offset;
  }

  clear(): void {
    this.#starts.length = 0;
    this.#ends.length = 0;
  }

  #firstStartAtLeast(offset: number): number {
    let lo = 0;
    let hi = this.#starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#starts[mid]! < offset) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
