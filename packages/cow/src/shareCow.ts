import { DataPtr, InvalidArgumentError, Runtime, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import { CowContext } from './CowContext.js';
import { cowDeleter, isCowDataPtr } from './cowDeleter.js';
import { lazyClone } from './lazyClone.js';
import { materialize } from './materialize.js';
import { sharedCowPinsOf } from './SharedCowPins.js';

/**
 * A lazy copy of a shared-memory storage, as plain data that `postMessage` carries to a worker_thread: the
 * SharedArrayBuffer and range of the data, the SharedArrayBuffer of the COW context's count and lock, and a
 * one-word claim that makes the descriptor good for one `receiveCow`.
 */
export interface SharedCowStorage {
  readonly data: SharedArrayBuffer;
  readonly byteOffset: number;
  readonly byteLength: number;
  readonly state: SharedArrayBuffer;
  readonly claim: SharedArrayBuffer;
}

/**
 * Makes a lazy copy of `storage`, a storage of `rt`, to hand to one other thread: one more reference on its COW
 * context (made COW first if needed), described by shared memory only. The receiver makes a storage of it with
 * `receiveCow`, once; its release drops that reference. Call once per receiver. The data stays owned by this
 * runtime's allocator, which frees it here once every receiver is done, even if this thread's own storages went
 * first (Note [COW across threads]); `rt` keeps the pins that `collectSharedCow(rt)` collects.
 * @throws InvalidArgumentError when `rt` is not a Runtime, the storage is not SharedArrayBuffer-backed, or its
 * allocator does not own it
 */
export function shareCow(rt: Runtime, storage: StorageImpl): SharedCowStorage {
  if (!(rt instanceof Runtime)) throw new InvalidArgumentError('rt', rt, 'the Runtime that made the storage');
  if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl');
  if (storage.isReleased) throw new UseAfterReleaseError('Cannot share a released storage.');
  const ptr = storage.peekDataPtr();
  if (!(ptr.handle instanceof SharedArrayBuffer)) {
    throw new InvalidArgumentError('storage', 'a storage over ' + (ptr.handle as object)?.constructor?.name, 'SharedArrayBuffer-backed to cross threads (allocate it with { shared: true })');
  }
  const pins = sharedCowPinsOf(rt);
  pins.collect(); // frees what earlier receivers are done with
  if (!isCowDataPtr(ptr)) {
    const probe = lazyClone(storage); // converts the pointer to COW in place
    if (probe === null) throw new InvalidArgumentError('storage', 'a storage whose allocator does not own its data', 'owned by its allocator');
    probe.release();
  }
  const context = ptr.context as CowContext;
  // A storage received from another thread is forwarded: the owner's pin already outlives every reference.
  if (context.originalDeleter !== null) context.pinForSharing(ptr.byteLength, pins);
  context.incref();
  return {
    data: ptr.handle,
    byteOffset: ptr.byteOffset,
    byteLength: ptr.byteLength,
    state: context.state.buffer as SharedArrayBuffer,
    claim: new SharedArrayBuffer(4),
  };
}

/**
 * Frees the data of storages `rt` shared whose receivers and local storages are all done; returns the bytes
 * freed. It runs by itself at each `shareCow`, when the last local storage over the data goes, and (with the cow
 * plugin) when the allocator runs out of memory; call it to return memory sooner. Other runtimes' shared
 * storages are theirs to collect.
 * @throws InvalidArgumentError when `rt` is not a Runtime
 */
export function collectSharedCow(rt: Runtime): number {
  if (!(rt instanceof Runtime)) throw new InvalidArgumentError('rt', rt, 'a Runtime');
  return sharedCowPinsOf(rt).collect();
}

/**
 * Note [COW across threads]: the receiving thread gets a storage over the shared data whose COW context uses
 * the sender's count and lock words, so clones and materializations on both sides coordinate through Atomics.
 * Only the sender's allocator can free the data, so the sender pins it (one extra reference, once per context)
 * when it first shares it: a receiver then never holds the last reference, copies when it writes, and never
 * steals; the sender frees the data when the pin is the only reference left, which it sees when its own last
 * storage over the data goes, at its runtime's next `shareCow`, in its out-of-memory path, or in `collectSharedCow`. A
 * descriptor that is never received keeps its reference, and with it the data, for the sender's lifetime.
 * @throws InvalidArgumentError for a descriptor that is not one `shareCow` made, or one already received
 */
export function receiveCow(rt: Runtime, shared: SharedCowStorage): StorageImpl {
  checkDescriptor(shared);
  const claim = new Int32Array(shared.claim);
  if (Atomics.compareExchange(claim, 0, 0, 1) !== 0) {
    throw new InvalidArgumentError('shared', 'a descriptor already received', 'a fresh descriptor: call shareCow once per receiver');
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
  try {
    return rt.adopt(ptr);
  } catch (error) {
    Atomics.store(claim, 0, 0); // not received: the descriptor keeps its reference and may be received again
    throw error;
  }
}

/** Throws InvalidArgumentError unless `shared` has the shape `shareCow` gives and its range lies inside its data. */
function checkDescriptor(shared: SharedCowStorage): void {
  const words = (buffer: unknown, min: number): boolean => buffer instanceof SharedArrayBuffer && buffer.byteLength >= min && buffer.byteLength % 4 === 0;
  if (typeof shared !== 'object' || shared === null || !(shared.data instanceof SharedArrayBuffer) || !words(shared.state, 8) || !words(shared.claim, 4)) {
    throw new InvalidArgumentError('shared', shared, 'a descriptor made by shareCow');
  }
  const { byteOffset, byteLength, data } = shared;
  if (!Number.isSafeInteger(byteOffset) || !Number.isSafeInteger(byteLength) || byteOffset < 0 || byteLength < 0 || byteOffset + byteLength > data.byteLength) {
    throw new InvalidArgumentError('shared', { byteOffset, byteLength }, `a range inside its data's ${data.byteLength} bytes (a descriptor made by shareCow)`);
  }
}
