import type { StorageImpl } from '@stowage/core';
import type { Residency } from '@stowage/lms';

/** One LMS `pagedOut` event: which storage (numbered by first appearance in the trace), its bytes, and whether it was copied. */
export interface PageOutRecord {
  readonly storage: number;
  readonly bytes: number;
  readonly copied: boolean;
}

/**
 * The sequence of one run's page-outs, from an Residency's `pagedOut` events. Storages are numbered in the order
 * of their first page-out, so two runs of the same seeded loop that reclaim the
 * same storages in the same order give equal traces, and runs that choose differently (even among storages of
 * equal size) give different ones.
 */
export class PageOutTrace {
  readonly records: PageOutRecord[] = [];
  readonly #numbers = new WeakMap<StorageImpl, number>();
  #next = 0;

  /** Records the page-outs of `device` from now on. */
  listen(device: Residency): void {
    device.events.on('pagedOut', ({ storage, bytes, copied }) => this.records.push({ storage: this.#numberOf(storage), bytes, copied }));
  }

  /** The bytes paged out (copies only: a reused host copy moves nothing). */
  get copiedBytes(): number {
    let bytes = 0;
    for (const r of this.records) if (r.copied) bytes += r.bytes;
    return bytes;
  }

  /** True when `other` paged out the same storages, in the same order, with the same bytes and copies. */
  equals(other: PageOutTrace): boolean {
    if (other.records.length !== this.records.length) return false;
    return this.records.every((r, i) => {
      const o = other.records[i]!;
      return r.storage === o.storage && r.bytes === o.bytes && r.copied === o.copied;
    });
  }

  #numberOf(storage: StorageImpl): number {
    let n = this.#numbers.get(storage);
    if (n === undefined) this.#numbers.set(storage, (n = this.#next++));
    return n;
  }
}
