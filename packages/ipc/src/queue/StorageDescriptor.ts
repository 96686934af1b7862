import type { MessagePort } from 'node:worker_threads';

import type { DType } from '@stowage/core';
import { DTYPE_ITEMSIZE, InvalidArgumentError } from '@stowage/core';

import type { CounterSlot } from '../refcount/CounterSlot.js';
import { expectCounterSlot } from '../refcount/RefCounterFiles.js';
import { SHARED_MEMORY_NAME } from '../shm/SharedMemoryFile.js';

/** Host memory shared between worker threads: a range of a SharedArrayBuffer (zero copy through postMessage). */
export interface SabMemory {
  readonly kind: 'sab';
  readonly buffer: SharedArrayBuffer;
  readonly byteOffset: number;
}

/** Host memory shared between processes: a range of a POSIX shared-memory object (a `sharedMemoryCpu()` segment). */
export interface ShmMemory {
  readonly kind: 'shm';
  /** The object's name, as `SharedMemoryFile.open` takes it. */
  readonly name: string;
  readonly byteOffset: number;
}

/** The layout of a sent tensor, in elements, as TensorImpl has it. */
export interface TensorDescriptor {
  readonly dtype: DType;
  readonly sizes: readonly number[];
  readonly strides: readonly number[];
  readonly storageOffset: number;
}

/** Who put the storage: the consumer refuses a descriptor put by its own thread. */
export interface ProducerIdentity {
  readonly pid: number;
  readonly threadId: number;
}

/**
 * One sent storage as plain, structured-cloneable data: what `StorageQueue#put` posts and `get` turns back into a
 * storage. `slot` is the counter the consumer acquires on receipt and releases when done.
 */
export interface StorageDescriptor {
  /** Always `'cpu:0'` (host memory). */
  readonly device: string;
  readonly memory: SabMemory | ShmMemory;
  readonly byteLength: number;
  /** Present when a tensor was put: its layout over the storage. */
  readonly tensor?: TensorDescriptor;
  readonly slot: CounterSlot;
  readonly producer: ProducerIdentity;
}

/** What a StorageQueue posts on its port. */
export type QueueMessage =
  | { readonly stowage: 'ipc.storage'; readonly descriptor: StorageDescriptor }
  | { readonly stowage: 'ipc.close' }
  /** Over a MessagePort, once per end: the sender's identity and its liveness port (Note [Dead consumers]). */
  | { readonly stowage: 'ipc.hello'; readonly pid: number; readonly threadId: number; readonly alive: MessagePort };

const isIndex = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * Checks the shape of a descriptor received from another thread: every field present with the right type, the
 * range inside its buffer (for `sab`; a `shm` range is checked against the object when it is opened), a well-formed counter slot. The counter file itself is checked on acquire.
 * @throws InvalidArgumentError naming the first field that is wrong
 */
export function checkStorageDescriptor(d: unknown): asserts d is StorageDescriptor {
  const bad = (field: string, value: unknown, expected: string): InvalidArgumentError => new InvalidArgumentError(`descriptor${field}`, value, expected);
  if (typeof d !== 'object' || d === null) throw bad('', d, 'a StorageDescriptor made by StorageQueue#put');
  const x = d as Record<string, unknown>;
  if (x.device !== 'cpu:0') throw bad('.device', x.device, "'cpu:0' (host memory is the only kind a worker queue carries)");
  const memory = x.memory as Record<string, unknown> | null;
  const sab = typeof memory === 'object' && memory !== null && memory.kind === 'sab' && memory.buffer instanceof SharedArrayBuffer;
  const shm = typeof memory === 'object' && memory !== null && memory.kind === 'shm' && typeof memory.name === 'string' && SHARED_MEMORY_NAME.test(memory.name);
  if (!sab && !shm) throw bad('.memory', memory, "{ kind: 'sab', buffer: SharedArrayBuffer, byteOffset } or { kind: 'shm', name, byteOffset }");
  if (!isIndex(memory!.byteOffset)) throw bad('.memory.byteOffset', memory!.byteOffset, 'an integer ≥ 0');
  if (!isIndex(x.byteLength)) throw bad('.byteLength', x.byteLength, 'an integer ≥ 0');
  if (memory!.kind === 'sab' && memory!.byteOffset + x.byteLength > (memory!.buffer as SharedArrayBuffer).byteLength) {
    throw bad('.byteLength', x.byteLength, `a range inside the buffer's ${(memory!.buffer as SharedArrayBuffer).byteLength} bytes from offset ${memory!.byteOffset as number}`);
  }
  const producer = x.producer as Record<string, unknown> | null;
  if (typeof producer !== 'object' || producer === null || !isIndex(producer.pid) || !isIndex(producer.threadId)) {
    throw bad('.producer', producer, '{ pid, threadId }');
  }
  try {
    expectCounterSlot(x.slot as CounterSlot);
  } catch (error) {
    throw bad('.slot', x.slot, `a CounterSlot { file, slot, nonce } (${(error as Error).message})`);
  }
  if (x.tensor !== undefined) {
    const t = x.tensor as Record<string, unknown> | null;
    if (
      typeof t !== 'object' || t === null || typeof t.dtype !== 'string' || !Object.hasOwn(DTYPE_ITEMSIZE, t.dtype) ||
      !Array.isArray(t.sizes) || !t.sizes.every(isIndex) || !Array.isArray(t.strides) || !t.strides.every(isIndex) ||
      t.sizes.length !== t.strides.length || !isIndex(t.storageOffset)
    ) {
      throw bad('.tensor', t, '{ dtype, sizes, strides (as many as sizes), storageOffset }');
    }
  }
}
