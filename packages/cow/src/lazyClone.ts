import { DataPtr, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import { CowContext } from './CowContext.js';
import { cowDeleter, isCowDataPtr } from './cowDeleter.js';
import { materialize } from './materialize.js';

/**
 * A lazy copy of `storage`: a new StorageImpl over the same data, copied only when one side writes. O(1)
 * whatever the size. The first lazy clone turns the storage's DataPtr into a COW one in place.
 *
 * Returns null, changing nothing, when the storage's allocator does not own its DataPtr (an imported
 * GPUBuffer, an IPC storage, a pointer whose deleter belongs to someone else): COW cannot take over freeing
 * memory it does not own. Callers then copy eagerly.
 * @throws InvalidArgumentError for a non-storage; UseAfterReleaseError for a released storage
 */
export function lazyClone(storage: StorageImpl): StorageImpl | null {
  if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl');
  if (storage.isReleased) throw new UseAfterReleaseError('Cannot lazily clone a released storage.');
  const ptr = storage.peekDataPtr();
  let context: CowContext;
  if (isCowDataPtr(ptr)) {
    context = ptr.context as CowContext;
  } else {
    if (!storage.allocator.owns?.(ptr)) return null;
    context = new CowContext({
      shared: typeof SharedArrayBuffer !== 'undefined' && ptr.handle instanceof SharedArrayBuffer,
      originalDeleter: ptr.deleter,
      originalContext: ptr.context,
      materialize,
    });
    if (!ptr.compareExchangeDeleter(ptr.deleter, cowDeleter, context)) return null;
  }
  context.incref();
  const clone = new DataPtr({
    device: ptr.device,
    byteLength: ptr.byteLength,
    handle: ptr.handle,
    byteOffset: ptr.byteOffset,
    address: ptr.address,
    context,
    deleter: cowDeleter,
  });
  try {
    return storage.sibling(clone);
  } catch (error) {
    clone.release();
    throw error;
  }
}
