import type { Device } from '@stowage/core';
import { formatDevice } from '@stowage/core';

import type { SentData } from './SentData.js';

/**
 * The producer's limbo (PyTorch's `CudaIPCSentDataLimbo`): allocations whose producer storage was released while
 * a consumer still held a reference. They stay allocated, so no consumer ever reads memory the allocator reused,
 * until a collection finds every counter of theirs at zero.
 *
 * Invariants: bytes(d) == Σ byteLength of the entries on device d; every entry is released and not freed.
 */
export class Limbo {
  readonly #entries = new Set<SentData>();
  readonly #bytes = new Map<string, number>();
  #totalBytes = 0;

  get size(): number {
    return this.#entries.size;
  }

  /** Bytes waiting in the limbo, on `device` or on every device. */
  bytes(device?: Device): number {
    return device === undefined ? this.#totalBytes : (this.#bytes.get(formatDevice(device)) ?? 0);
  }

  add(sent: SentData): void {
    if (this.#entries.has(sent)) return;
    this.#entries.add(sent);
    this.#account(sent, sent.byteLength);
  }

  delete(sent: SentData): void {
    if (!this.#entries.delete(sent)) return;
    this.#account(sent, -sent.byteLength);
  }

  /** The entries, on `device` or every device, oldest first (a copy: the caller may delete while iterating). */
  entries(device?: Device): SentData[] {
    const all = [...this.#entries];
    if (device === undefined) return all;
    const key = formatDevice(device);
    return all.filter((s) => formatDevice(s.device) === key);
  }

  #account(sent: SentData, bytes: number): void {
    const key = formatDevice(sent.device);
    const next = (this.#bytes.get(key) ?? 0) + bytes;
    if (next === 0) this.#bytes.delete(key);
    else this.#bytes.set(key, next);
    this.#totalBytes += bytes;
  }
}
