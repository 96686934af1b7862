import { DataPtr, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import type { CowContext } from './CowContext.js';
import { cowDeleter } from './cowDeleter.js';

/** What `materialize` did: nothing (not a COW storage), a copy, or kept the data as the last reference. */
export type Materialization = 'none' | 'copied' | 'stolen';

/**
 * Gives `storage` data of its own before a write (StorageImpl#mutableData calls it; calling it directly is
 * allowed). With other references to the data left, copies it under the context's shared lock and drops this
 * storage's reference; as the last reference, takes the exclusive lock (waiting for copies in flight) and
 * keeps the data without copying. A storage that is not COW is left alone ('none').
 * Copies run on the storage's allocator (`copyData`), so device data is copied on the device's queue, in
 * order before any later write to either side.
 * @throws UseAfterReleaseError for a released storage; OutOfMemoryError when the copy cannot be allocated
 * (the storage is then unchanged and still COW)
 */
export function materialize(storage: StorageImpl): Materialization {
  if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl');
  if (storage.isReleased) throw new UseAfterReleaseError('Cannot materialize a released storage.');
  const ptr = storage.peekDataPtr();
  if (ptr.deleter !== cowDeleter) return 'none';
  const context = ptr.context as CowContext;
  if (context.isSoleReference) {
    context.lockExclusive();
    try {
      if (context.isSoleReference) {
        const owned = new DataPtr({
          device: ptr.device,
          byteLength: ptr.byteLength,
          handle: ptr.handle,
          byteOffset: ptr.byteOffset,
          address: ptr.address,
          context: context.originalContext,
          deleter: context.originalDeleter,
        });
        // The COW pointer goes away without freeing: the data moved to `owned`.
        ptr.compareExchangeDeleter(cowDeleter, null, null);
        storage.setDataPtr(owned);
        ptr.release();
        context.release();
        return 'stolen';
      }
    } finally {
      context.unlockExclusive();
    }
  }
  const allocator = storage.allocator;
  const shared = typeof SharedArrayBuffer !== 'undefined' && ptr.handle instanceof SharedArrayBuffer;
  const fresh = allocator.allocate(ptr.byteLength, shared ? { shared } : {});
  context.lockShared();
  try {
    allocator.copyData(fresh, ptr, ptr.byteLength);
  } catch (error) {
    fresh.release();
    throw error;
  } finally {
    context.unlockShared();
  }
  storage.setDataPtr(fresh);
  ptr.release(); // drops this storage's reference; the last one frees the original data
  return 'copied';
}
