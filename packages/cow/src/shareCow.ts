import type { Runtime } from '@stowage/core';
import { DataPtr, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import { CowContext } from './CowContext.js';
import { cowDeleter, isCowDataPtr } from './cowDeleter.js';
import { lazyClone } from './lazyClone.js';
import { materialize } from './materialize.js';

/**
 * A lazy copy of a shared-memory storage, as plain data that `postMessage` carries to a worker_thread: the
 * SharedArrayBuffer and range of the data and the SharedArrayBuffer of the COW context's count and lock.
 */
export interface SharedCowStorage {
  readonly data: SharedArrayBuffer;
  readonly byteOffset: number;
  readonly byteLength: number;
  readonly state: SharedArrayBuffer;
}

/**
 * Makes a lazy copy of `storage` to hand to another thread: one more reference on its COW context (made
 * COW first if needed), described by shared memory only. The receiver makes a storage of it with
 * `receiveCow`; its release drops that reference. The data itself stays owned by this thread's allocator,
 * which frees it when this thread's last reference goes, so keep a reference here until the receivers are
 * done (Note [COW across threads]).
 * @throws InvalidArgumentError when the storage is not SharedArrayBuffer-backed or its allocator does not own it
 */
export function shareCow(storage: StorageImpl): SharedCowStorage {
  if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl');
  if (storage.isReleased) throw new UseAfterReleaseError('Cannot share a released storage.');
  const ptr = storage.peekDataPtr();
  if (!(ptr.handle instanceof SharedArrayBuffer)) {
    throw new InvalidArgumentError('storage', 'a storage over ' + (ptr.handle as object)?.constructor?.name, 'SharedArrayBuffer-backed to cross threads (allocate it with { shared: true })');
  }
  if (!isCowDataPtr(ptr)) {
    const probe = lazyClone(storage); // converts the pointer to COW in place
    if (probe === null) throw new InvalidArgumentError('storage', 'a storage whose allocator does not own its data', 'owned by its allocator');
    probe.release();
  }
  const context = ptr.context as CowContext;
  context.incref();
  return { data: ptr.handle, byteOffset: ptr.byteOffset, byteLength: ptr.byteLength, state: context.state.buffer as SharedArrayBuffer };
}

/**
 * Note [COW across threads]: the receiving thread gets a storage over the shared data whose COW context uses
 * the sender's count and lock words, so clones and materializations on both sides coordinate through Atomics.
 * Its copies go to the receiver's own allocator; if it is the last reference it keeps the data (a steal) but
 * never frees it, since only the sender's allocator can.
 * @throws InvalidArgumentError for a descriptor that is not one `shareCow` made
 */
export function receiveCow(rt: Runtime, shared: SharedCowStorage): StorageImpl {
  if (!(shared?.data instanceof SharedArrayBuffer) || !(shared.state instanceof SharedArrayBuffer) || shared.state.byteLength < 8) {
    throw new InvalidArgumentError('shared', shared, 'a descriptor made by shareCow');
  }
  const context = new CowContext({ shared: true, originalDeleter: null, originalContext: null, materialize, state: new Int32Array(shared.state) });
  const ptr = new DataPtr({
    device: { type: 'cpu', index: 0 },
    byteLength: shared.byteLength,
    handle: shared.data,
    byteOffset: shared.byteOffset,
    address: 0,
    context,
    deleter: cowDeleter,
  });
  return rt.adopt(ptr);
}
