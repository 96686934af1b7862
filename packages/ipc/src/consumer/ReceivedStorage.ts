import type { StorageImpl, TensorImpl } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';
import { DataPtr, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';

import type { CounterSlot } from '../refcount/CounterSlot.js';
import type { StorageDescriptor } from '../wire/StorageDescriptor.js';

/** The context of a received DataPtr: the counter it releases into, and how to tell its owner it was released. */
export interface ReceivedData {
  readonly slot: CounterSlot;
  /** Decrements the counter (RefCounterClient#release) and forgets the safety net; called once. */
  readonly release: () => void;
}

/** The deleter of every received DataPtr: gives the reference back to the producer (PyTorch's `CudaIPCReceivedData`). */
export const receivedDeleter: Deleter = (context) => (context as ReceivedData).release();

/** True when `ptr` is memory received from another thread or process (its producer frees it, not this runtime). */
export function isReceivedDataPtr(ptr: DataPtr): boolean {
  return ptr.deleter === receivedDeleter;
}

/**
 * A storage received through a StorageQueue: the producer's memory, zero copy, in a StorageImpl of the consumer's
 * runtime (its host allocator reads and writes it; the runtime does not track it, so it is not released by the
 * runtime's dispose: the runtime's IPC gives back every reference it still holds then). Release it when done,
 * with `release()` or `using`: the producer keeps the memory allocated until then. A received storage forgotten
 * without release is released when it is garbage-collected, with a warning (a safety net, not the contract).
 *
 * A received storage cannot be put into another queue (its producer frees it): copy it into a new storage first.
 */
export class ReceivedStorage implements Disposable {
  readonly descriptor: StorageDescriptor;
  readonly #storage: StorageImpl;
  readonly #tensor: TensorImpl | null;

  constructor(descriptor: StorageDescriptor, storage: StorageImpl, tensor: TensorImpl | null) {
    this.descriptor = descriptor;
    this.#storage = storage;
    this.#tensor = tensor;
  }

  /** The storage over the producer's memory. @throws UseAfterReleaseError after release */
  get storage(): StorageImpl {
    this.#checkLive('storage');
    return this.#storage;
  }

  /** The tensor, when a tensor was put; null for a storage. @throws UseAfterReleaseError after release */
  get tensor(): TensorImpl | null {
    this.#checkLive('tensor');
    return this.#tensor;
  }

  get byteLength(): number {
    return this.descriptor.byteLength;
  }

  get isReleased(): boolean {
    return this.#storage.isReleased;
  }

  /**
   * A Uint8Array over the received bytes (the producer's memory itself: writes are seen by the producer). Do not
   * keep it past `release()`: the producer reuses the memory, and shared memory from another process is unmapped
   * then (an access crashes the process; neither kind of buffer can be detached).
   * @throws UseAfterReleaseError after release; InvalidArgumentError for device memory (a CUDA storage: read it with
   *   its allocator's `readBytes(storage.data())`)
   */
  bytes(): Uint8Array {
    this.#checkLive('bytes');
    if (!this.descriptor.device.startsWith('cpu')) {
      throw new InvalidArgumentError('bytes()', `a ${this.descriptor.device} storage`, "host memory: read device memory through its allocator (rt.allocator(device).readBytes(received.storage.data()))");
    }
    const p = this.#storage.data();
    return new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength);
  }

  /** Gives the reference back to the producer. Idempotent. */
  release(): void {
    this.#storage.release();
  }

  [Symbol.dispose](): void {
    this.release();
  }

  #checkLive(member: string): void {
    if (this.#storage.isReleased) {
      throw new UseAfterReleaseError(`Cannot use ${member} of a received ${this.descriptor.byteLength}-byte storage after its release: the producer may have reused its memory.`);
    }
  }
}

/** A DataPtr over `handle` (the descriptor's memory, mapped) whose release runs `data.release`. */
export function receivedDataPtr(descriptor: StorageDescriptor, handle: ArrayBuffer | SharedArrayBuffer, data: ReceivedData): DataPtr {
  return new DataPtr({
    device: { type: 'cpu', index: 0 },
    byteLength: descriptor.byteLength,
    handle,
    byteOffset: descriptor.memory.byteOffset,
    address: 0,
    context: data,
    deleter: receivedDeleter,
  });
}

