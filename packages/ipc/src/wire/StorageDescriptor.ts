import type { DType } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { DTYPE_ITEMSIZE } from '@stowage/core/plugin-kit';

import type { CounterSlot } from '../refcount/CounterSlot.js';
import { expectCounterSlot } from '../refcount/RefCounterFiles.js';
import { SHARED_MEMORY_NAME } from '../shm/SharedMemoryFile.js';
import type { CudaExport } from './CudaIpcAllocator.js';
import { checkCudaExport } from './CudaIpcAllocator.js';

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
  /** The object's inode: a consumer maps the object of this name only while it is this one (Note [Idle mappings] in consumer/SharedMappings.ts). */
  readonly inode: number;
  readonly byteOffset: number;
}

/**
 * Device memory of a CUDA device: the block's `CudaAllocator#exportIpc` (legacy handle bytes, or the producer's
 * file descriptors of an expandable segment's pages, which the consumer takes with `pidfd_getfd`).
 */
export interface CudaMemory {
  readonly kind: 'cuda';
  readonly exported: CudaExport;
  /** Always 0: the export carries the block's offset. */
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
  /** `'cpu:0'` for host memory (`sab`, `shm`), `'cuda:N'` for device memory (`cuda`). */
  readonly device: string;
  readonly memory: SabMemory | ShmMemory | CudaMemory;
  readonly byteLength: number;
  /** Present when a tensor was put: its layout over the storage. */
  readonly tensor?: TensorDescriptor;
  readonly slot: CounterSlot;
  readonly producer: ProducerIdentity;
}

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
  const cudaDevice = typeof x.device === 'string' ? /^cuda:(0|[1-9][0-9]{0,3})$/.exec(x.device) : null;
  if (x.device !== 'cpu:0' && cudaDevice === null) throw bad('.device', x.device, "'cpu:0' (host memory) or 'cuda:N' (CUDA device memory)");
  const memory = x.memory as Record<string, unknown> | null;
  const sab = typeof memory === 'object' && memory !== null && memory.kind === 'sab' && memory.buffer instanceof SharedArrayBuffer;
  const shm = typeof memory === 'object' && memory !== null && memory.kind === 'shm' && typeof memory.name === 'string' && SHARED_MEMORY_NAME.test(memory.name) && isIndex(memory.inode);
  const cuda = typeof memory === 'object' && memory !== null && memory.kind === 'cuda';
  if (cudaDevice === null ? !sab && !shm : !cuda) {
    throw bad('.memory', memory, cudaDevice === null ? "{ kind: 'sab', buffer: SharedArrayBuffer, byteOffset } or { kind: 'shm', name, inode, byteOffset }" : "{ kind: 'cuda', exported, byteOffset: 0 }");
  }
  if (!isIndex(memory!.byteOffset) || (cuda && memory!.byteOffset !== 0)) throw bad('.memory.byteOffset', memory!.byteOffset, cuda ? '0' : 'an integer ≥ 0');
  if (!isIndex(x.byteLength)) throw bad('.byteLength', x.byteLength, 'an integer ≥ 0');
  if (cudaDevice !== null) checkCudaExport(memory!.exported, Number(cudaDevice[1]), x.byteLength);
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
