import type { DataPtr, Device, Pager } from '@stowage/core';
import type { PageOut } from '@stowage/core/plugin-kit';
import { byteRange } from './AccessHazards.js';
import type { SimulatedDevice, SimulatedHandle, TimelineEntry } from './SimulatedDevice.js';

/** A page-out of a SimulatedDevice: its bytes are on the host at once; `entry` says when the simulated copy ran. */
export interface SimulatedPageOut extends PageOut {
  readonly bytes: Uint8Array;
  readonly entry: TimelineEntry;
}

/**
 * LMS paging on a SimulatedDevice: the pager of its memory (core's CpuPager, or an address-only device's, which
 * keeps only written bytes) moves the bytes at once, and each copy is enqueued on the link's engine for its simulated time (Note [Paging in device order] in core's Pager).
 *
 * - `pageOut(src)` runs on the d2h engine after the kernels that write `src`'s bytes; later writers of those
 *   bytes (a reuse of the freed block) start after it.
 * - `pageIn(bytes, dst)` runs on the h2d engine, and no earlier than the page-out that produced `bytes` ends: the
 *   host holds them only then. Later kernels that touch `dst` start after it.
 *
 * Note [Copied at once, read at the start]: a page-out copies the block when it is enqueued, while the simulated
 * d2h engine reads it conceptually at the copy's start time, maybe much later. The two read the same bytes (Note
 * [Work at enqueue] in SimulatedDevice.ts): every operation that wrote them before was enqueued before, so its
 * bytes are already there and it ends before the page-out starts (a read-after-write hazard); every operation
 * that writes them after is enqueued after, so its bytes are not there yet, and it starts only after the page-out
 * ends (write after read). So `src` may be freed, and its block reused at once by another storage, as the Pager
 * contract allows: the reuse's writes wait in simulated time, and the copy keeps the bytes it was given.
 */
export class SimulatedPager implements Pager {
  readonly device: Device;
  readonly #device: SimulatedDevice;
  /** Moves the bytes, at once: the host memory's pager. */
  readonly #bytes: Pager;
  /** When each page-out's host array is complete, simulated nanoseconds, by the array's buffer. */
  readonly #onHostAtNs = new WeakMap<ArrayBufferLike, number>();

  constructor(device: SimulatedDevice, hostPager: Pager) {
    this.device = device.device;
    this.#device = device;
    this.#bytes = hostPager;
  }

  /** Copies `src` to a new host array now and enqueues the simulated copy; `done` resolves at once. */
  pageOut(src: DataPtr): SimulatedPageOut {
    const out = this.#bytes.pageOut(src)!; // host memory: a host pager never refuses
    const bytes = out.bytes!;
    const device = this.#device;
    const reads = [byteRange(src.handle as SimulatedHandle, src.byteOffset, src.byteLength)];
    const entry = device.enqueue('d2h', 'pageOut', device.copyDurationNs(bytes.byteLength), { reads, bytes: bytes.byteLength });
    this.#onHostAtNs.set(bytes.buffer, entry.endNs);
    return { byteLength: bytes.byteLength, bytes, done: out.done, entry };
  }

  /** Copies `bytes` into `dst` now and enqueues the simulated copy, after the page-out that produced them. */
  pageIn(bytes: Uint8Array, dst: DataPtr): TimelineEntry {
    this.#bytes.pageIn(bytes, dst);
    const device = this.#device;
    const writes = [byteRange(dst.handle as SimulatedHandle, dst.byteOffset, bytes.byteLength)];
    const afterNs = this.#onHostAtNs.get(bytes.buffer) ?? 0;
    return device.enqueue('h2d', 'pageIn', device.copyDurationNs(bytes.byteLength), { writes, afterNs, bytes: bytes.byteLength });
  }
}
