/** Bytes `[lo, hi)` of one segment (a backend handle), as one simulated operation reads or writes them. */
export interface ByteRange {
  readonly handle: object;
  readonly lo: number;
  readonly hi: number;
}

/** The bytes `byteLength` long from `byteOffset` of segment `handle`. */
export function byteRange(handle: object, byteOffset: number, byteLength: number): ByteRange {
  return { handle, lo: byteOffset, hi: byteOffset + byteLength };
}

interface Access {
  readonly lo: number;
  readonly hi: number;
  readonly write: boolean;
  /** When the operation that made this access ends, simulated nanoseconds. */
  readonly endNs: number;
}

/**
 * The data hazards between simulated operations: an operation may start only after every earlier operation that
 * wrote bytes it reads or writes (read after write, write after write), and every earlier operation that read
 * bytes it writes (write after read), has ended. Copies and kernels of one device share it, whatever their engine.
 *
 * Note [Exact pruning]: an access is dropped only when no later operation can be held back by it: when it ends
 * at or before the host's clock (later operations start no earlier); when a later write covers its range (that
 * write waited for it, so it ends later, and it conflicts with everything the dropped access did); or when it is a
 * read and a later read covering its range ends no earlier. So `readyAtNs` gives the same answer as a scan of
 * every access ever made. A list holds at most the distinct ranges of its segment touched since the host last
 * waited past them, and far fewer when kernels write whole blocks.
 *
 * Invariants: every list is non-empty; lo < hi for every access.
 */
export class AccessHazards {
  readonly #accesses = new Map<object, Access[]>();

  /** The earliest time an operation with these ranges may start: the latest end among the accesses it conflicts with (0 when none). */
  readyAtNs(reads: readonly ByteRange[], writes: readonly ByteRange[]): number {
    let readyNs = 0;
    for (const range of writes) {
      for (const access of this.#accesses.get(range.handle) ?? []) {
        if (overlaps(access, range) && access.endNs > readyNs) readyNs = access.endNs;
      }
    }
    for (const range of reads) {
      for (const access of this.#accesses.get(range.handle) ?? []) {
        if (access.write && overlaps(access, range) && access.endNs > readyNs) readyNs = access.endNs;
      }
    }
    return readyNs;
  }

  /** Records an operation ending at `endNs`, which started no earlier than `readyAtNs(reads, writes)`. */
  record(reads: readonly ByteRange[], writes: readonly ByteRange[], endNs: number): void {
    for (const range of writes) {
      if (range.lo < range.hi) this.#add(range, true, endNs, () => true);
    }
    for (const range of reads) {
      if (range.lo >= range.hi || writes.some((w) => w.handle === range.handle && covers(w, range))) continue;
      this.#add(range, false, endNs, (access) => !access.write && access.endNs <= endNs);
    }
  }

  /** Drops every access that ends at or before `nowNs` (Note [Exact pruning]). */
  prune(nowNs: number): void {
    for (const [handle, list] of this.#accesses) {
      const live = list.filter((access) => access.endNs > nowNs);
      if (live.length === 0) this.#accesses.delete(handle);
      else this.#accesses.set(handle, live);
    }
  }

  /**
   * When the last operation touching any byte of segment `handle` ends (0 when none is pending). Exact under the
   * pruning: an access is dropped only for one ending no earlier, or once the host's clock has passed it.
   */
  lastEndNs(handle: object): number {
    let endNs = 0;
    for (const access of this.#accesses.get(handle) ?? []) endNs = Math.max(endNs, access.endNs);
    return endNs;
  }

  /** Forgets a segment given back to the device: no operation can touch it again. */
  forget(handle: object): void {
    this.#accesses.delete(handle);
  }

  /** Accesses held for `handle` (for tests of the pruning). */
  pendingAccesses(handle: object): number {
    return this.#accesses.get(handle)?.length ?? 0;
  }

  #add(range: ByteRange, write: boolean, endNs: number, isDominated: (access: Access) => boolean): void {
    const list = (this.#accesses.get(range.handle) ?? []).filter((access) => !(covers(range, access) && isDominated(access)));
    list.push({ lo: range.lo, hi: range.hi, write, endNs });
    this.#accesses.set(range.handle, list);
  }
}

function overlaps(a: { lo: number; hi: number }, b: { lo: number; hi: number }): boolean {
  return a.lo < b.hi && b.lo < a.hi;
}

function covers(outer: { lo: number; hi: number }, inner: { lo: number; hi: number }): boolean {
  return outer.lo <= inner.lo && inner.hi <= outer.hi;
}
