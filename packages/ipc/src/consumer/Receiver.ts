import type { Allocator, DataPtr, Runtime } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';
import { DisposedError, InvalidArgumentError, StorageImpl, TensorImpl, UseAfterReleaseError } from '@stowage/core';

import type { CounterSlot } from '../refcount/CounterSlot.js';
import { RefCounterClient } from '../refcount/RefCounterClient.js';
import { takeFds } from '../shm/descriptorFds.js';
import { isProcessAlive } from '../shm/isProcessAlive.js';
import { SharedMemoryFile } from '../shm/SharedMemoryFile.js';
import type { CudaExport } from '../wire/CudaIpcAllocator.js';
import { cudaIpcAllocatorOf } from '../wire/CudaIpcAllocator.js';
import type { StorageDescriptor } from '../wire/StorageDescriptor.js';
import { ReceivedStorage, receivedDataPtr, receivedDeleter } from './ReceivedStorage.js';
import { SharedMappings } from './SharedMappings.js';

/** The `code` of the warning emitted when a received storage was garbage-collected without its release. */
export const FORGOTTEN_RELEASE_WARNING_CODE = 'STOWAGE_IPC_FORGOTTEN_RELEASE';

/**
 * A received storage as the forgotten-release safety net sees it: one object per storage, at once its released
 * flag, the registry's held value and its unregister token (never the storage itself, which it watches).
 */
interface Forgotten {
  released: boolean;
  readonly slot: CounterSlot;
  readonly byteLength: number;
}

/**
 * The consumer's side of a runtime's IPC (PyTorch's `CudaIPCReceivedData`): turns descriptors other threads and
 * processes put into storages of this runtime — acquiring their counter slots (`client`), mapping their host memory
 * (`SharedMappings`) or opening their CUDA exports — and gives each reference back at its storage's release, or,
 * with a warning, when a received storage is garbage-collected unreleased (the safety net).
 *
 * Invariants: a received storage holds exactly one acquired reference until its release (or the safety net's);
 * after dispose nothing is held and every mapping is closed.
 */
export class Receiver {
  readonly client = new RefCounterClient();
  readonly #mappings = new SharedMappings();
  readonly #forgotten = new FinalizationRegistry<Forgotten>((f) => this.#releaseForgotten(f));
  readonly #onReceived: (ptr: DataPtr, bytes: number) => void;
  #disposed = false;

  /** @param onReceived told of each storage made (IPC's `received` event) */
  constructor(onReceived: (ptr: DataPtr, bytes: number) => void) {
    this.#onReceived = onReceived;
  }

  /**
   * Makes a storage of a descriptor another thread put (its shape already checked): acquires its counter slot,
   * wraps the memory zero copy in a StorageImpl of `rt`'s host allocator (and a TensorImpl for a tensor), and
   * watches it with the forgotten-release safety net.
   * @throws what RefCounterClient#acquire throws (forged, out of range, received twice, producer gone), or
   *   InvalidArgumentError for a tensor layout that does not fit; nothing is held when it throws
   */
  receive(rt: Runtime, descriptor: StorageDescriptor): ReceivedStorage {
    if (this.#disposed) throw new DisposedError('Ipc.receive() was called after the runtime was disposed.');
    if (descriptor.memory.kind === 'cuda') return this.#receiveCuda(rt, descriptor, descriptor.memory.exported);
    const slot = descriptor.slot;
    const memory = descriptor.memory;
    const shm = memory.kind === 'shm' ? memory : undefined;
    const handle = shm === undefined ? (memory as { buffer: SharedArrayBuffer }).buffer : this.#mappings.map(shm, memory.byteOffset + descriptor.byteLength);
    try {
      this.client.acquire(slot);
    } catch (error) {
      if (shm !== undefined) this.#mappings.unmap(shm);
      throw error;
    }
    const entry: Forgotten = { released: false, slot, byteLength: descriptor.byteLength };
    const release = (): void => {
      if (entry.released) return;
      entry.released = true;
      this.#forgotten.unregister(entry);
      if (this.#disposed) return;
      // The last holder unlinks: the producer left the name of a segment still held (it exited or was disposed).
      const unlink = shm !== undefined && this.#mappings.uses(shm) === 1 && this.client.producerGone(slot);
      try {
        this.client.release(slot);
      } finally {
        if (shm !== undefined) this.#mappings.unmap(shm);
        if (unlink) {
          try {
            SharedMemoryFile.unlink(shm.name);
          } catch {
            // Another consumer unlinked it first.
          }
        }
      }
    };
    const ptr = receivedDataPtr(descriptor, handle, { slot, release });
    return this.#wrap(rt, descriptor, ptr, entry, rt.allocator('cpu'));
  }

  /**
   * Note [CUDA over IPC]: the consumer acquires the slot, takes an expandable segment's file descriptors from the
   * producer (`pidfd_open(producer pid)` + `pidfd_getfd`, as PyTorch does: the kernel asks for ptrace access to the
   * producer), opens the export with its own runtime's CudaAllocator (`openIpc`, which closes the descriptors it
   * is given) and wraps the pointer in a storage of that allocator. The pointer's deleter becomes the received
   * deleter: release decrements the counter, then closes what `openIpc` opened. The producer keeps its copies of the
   * descriptors open until the consumer's `ipc.ack` (sent whether the open worked or not) or the slot is done. A
   * producer that exited took its device memory with its context: its storage is refused (UseAfterReleaseError).
   */
  #receiveCuda(rt: Runtime, descriptor: StorageDescriptor, exported: CudaExport): ReceivedStorage {
    const opener = cudaIpcAllocatorOf(rt, descriptor.device); // BackendUnavailableError without a cuda() plugin
    if (opener === undefined) {
      throw new InvalidArgumentError('rt', `a runtime whose ${descriptor.device} offers no IpcExporter service`, "a runtime with allocator-cuda's cuda() plugin, to open CUDA storages another process sent");
    }
    const slot = descriptor.slot;
    this.client.acquire(slot);
    const producer = descriptor.producer.pid;
    if (!isProcessAlive(producer)) {
      this.client.release(slot);
      throw new UseAfterReleaseError(
        `The producer of this ${descriptor.device} storage (process ${producer}) has exited, and its device memory went with its CUDA context: device memory, unlike host shared memory, does not outlive the process that allocated it. Keep a producer alive until its consumers have released what it sent.`,
      );
    }
    let ptr: DataPtr;
    try {
      ptr = opener.openIpc(exported.kind === 'shareable' ? { ...exported, fds: takeFds(producer, exported.fds) } : exported);
    } catch (error) {
      this.client.release(slot);
      throw error;
    }
    const closeDeleter = ptr.deleter as Deleter;
    const closeContext = ptr.context;
    const entry: Forgotten = { released: false, slot, byteLength: descriptor.byteLength };
    const release = (): void => {
      if (entry.released) return;
      entry.released = true;
      this.#forgotten.unregister(entry);
      let failure: unknown;
      try {
        if (!this.#disposed) this.client.release(slot);
      } catch (error) {
        failure = error;
      }
      try {
        closeDeleter(closeContext);
      } catch (error) {
        if (!this.#disposed) failure ??= error; // else the runtime's CUDA context is gone, and the mapping with it
      }
      if (failure !== undefined) throw failure;
    };
    ptr.compareExchangeDeleter(closeDeleter, receivedDeleter, { slot, release });
    return this.#wrap(rt, descriptor, ptr, entry, rt.allocator(descriptor.device));
  }

  /** Watches `ptr` with the safety net and wraps it as the received storage (and tensor) of `allocator`. */
  #wrap(rt: Runtime, descriptor: StorageDescriptor, ptr: DataPtr, entry: Forgotten, allocator: Allocator): ReceivedStorage {
    this.#forgotten.register(ptr, entry, entry);
    let storage: StorageImpl | undefined;
    try {
      storage = new StorageImpl({ dataPtr: ptr, allocator });
      const t = descriptor.tensor;
      const tensor = t === undefined ? null : new TensorImpl(storage, { sizes: t.sizes, strides: t.strides, storageOffset: t.storageOffset, dtype: t.dtype }, rt);
      const received = new ReceivedStorage(descriptor, storage, tensor);
      this.#onReceived(ptr, descriptor.byteLength);
      return received;
    } catch (error) {
      if (storage === undefined) ptr.release();
      else storage.release();
      throw error;
    }
  }

  /**
   * Gives back the reference a descriptor carries without making a storage of it (a descriptor refused after its
   * slot checked out, or left unread in a closed queue). Best effort: a forged or stale slot is left alone.
   */
  dropReference(slot: CounterSlot): void {
    if (this.#disposed) return;
    try {
      this.client.acquire(slot);
    } catch {
      return;
    }
    this.client.release(slot);
  }

  /** Unmaps the idle mappings (Note [Idle mappings]): a collection frees what it can. */
  closeIdleMappings(): void {
    this.#mappings.closeIdle();
  }

  /** Gives back every reference still held and unmaps everything. Idempotent. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.client.close();
    this.#mappings.closeAll();
  }

  #releaseForgotten(f: Forgotten): void {
    if (f.released || this.#disposed) return;
    f.released = true;
    // Its shared-memory mapping (if any) stays until dispose: a view of its bytes may outlive the storage.
    try {
      this.client.release(f.slot);
    } catch {
      // The producer reclaimed it already (it saw this thread end): nothing is held.
    }
    process.emitWarning(
      `A received ${f.byteLength}-byte storage was garbage-collected without release(); its reference was given back now. ` +
        'Release received storages when done (release() or using): until then the producer cannot free or reuse their memory.',
      { type: 'StowageIpcWarning', code: FORGOTTEN_RELEASE_WARNING_CODE },
    );
  }
}
