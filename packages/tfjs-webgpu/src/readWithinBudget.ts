import type { Runtime, StorageImpl } from '@stowage/core';
import type { Residency } from '@stowage/lms';
import { pin } from '@stowage/lms';

/** What `readWithinBudget` asks of the device's budget (`DeviceBudget` in @stowage/allocator-webgpu). */
export interface StagingRoom {
  /** True when a staging buffer for `length` bytes fits the budget now (pooled staging given back if needed). */
  stagingFits(length: number): boolean;
}

/** The smallest part a read is split into (bytes): below it, the read goes whole and beyond the budget. */
const SMALLEST_PART_BYTES = 4096;

/**
 * A host copy of `storage`'s bytes under LMS, its staging inside the device's budget where it can be.
 *
 * Note [Reads within the budget]: a host read copies the bytes into a readback staging buffer, and the budget
 * covers staging (Note [One budget] in @stowage/allocator-webgpu), but a read cannot wait for room inside the
 * allocator: it records its copy at once, and one that finds no room reads beyond the budget (`reads_over_budget`).
 * A tfjs `data()` is an async point, so here it can wait: a reclaimed storage reads its host copy (no staging);
 * otherwise, when the staging does not fit, the page-outs in flight are awaited first (their staging comes back),
 * and if it still does not fit the storage is pinned and read in parts, each as large as the room allows (halving
 * from the whole, down to 4 KiB), one after the other: a part's staging is pooled once mapped and serves the next.
 * The paging reserve (the webgpu plugin's `pagingReserve`) is room segments never take, so once page-outs landed a
 * read finds at least that. Only when not even 4 KiB fits does the read go whole, beyond the budget, counted.
 */
export async function readWithinBudget(runtime: Runtime, lmsDevice: Residency, room: StagingRoom, storage: StorageImpl): Promise<Uint8Array> {
  const byteLength = storage.byteLength;
  const fitsWhole = (): boolean => storage.lms?.state === 'reclaimed' || room.stagingFits(byteLength);
  if (fitsWhole()) return runtime.read(storage);
  await lmsDevice.settlePageOuts();
  if (fitsWhole()) return runtime.read(storage);
  let part = byteLength;
  while (part > SMALLEST_PART_BYTES && !room.stagingFits(part)) part = Math.max(SMALLEST_PART_BYTES, Math.ceil(part / 8) * 4);
  if (!room.stagingFits(part)) return runtime.read(storage);
  const guard = pin(storage); // resident (not reclaimed, checked above): pinning allocates nothing
  try {
    const bytes = new Uint8Array(byteLength);
    for (let offset = 0; offset < byteLength; offset += part) {
      bytes.set(await storage.allocator.readBytes(storage.data(), offset, Math.min(part, byteLength - offset)), offset);
    }
    return bytes;
  } finally {
    guard.release();
  }
}
