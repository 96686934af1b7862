import type { DataPtr, Device, MemoryReclaimer, Token } from '@stowage/core';
import { DisposedError, ForeignPointerError, formatDevice, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';

import type { CounterSlot } from '../refcount/CounterSlot.js';
import { RefCounterClient } from '../refcount/RefCounterClient.js';
import { RefCounterFiles } from '../refcount/RefCounterFiles.js';
import { Limbo } from './Limbo.js';
import type { SentData, SentDataOwner } from './SentData.js';
import { sentDeleter } from './SentData.js';

/** Options of the `ipc()` plugin. */
export interface IpcOptions {
  /**
   * `process.emitWarning` when the limbo grows past this many bytes (once per crossing; again after it fell back
   * to the threshold or below). Default 1 GiB; `Infinity` never warns.
   */
  readonly limboWarningBytes?: number;
  /** Counters per ref-counter file (RefCounterFiles' `slotsPerFile`). Default 4096. */
  readonly slotsPerFile?: number;
}

/** The `code` of the warning emitted when the limbo passes `limboWarningBytes`. */
export const LIMBO_WARNING_CODE = 'STOWAGE_IPC_LIMBO';

/**
 * Algorithm (after PyTorch's CUDA IPC refcounting, reference 002/003):
 * - `send(storage)` takes ownership of the storage's DataPtr with `compareExchangeDeleter` (its allocator's
 *   deleter and context move into a {@link SentData}), hands out a counter slot and increments it. Each send gets
 *   its own slot (one slot, one holder: RefCounterClient).
 * - When the producer releases its storage, the sent deleter runs: with every slot at count 0 the allocation is
 *   freed through the displaced deleter and its slots are `done()`; otherwise it moves to the limbo.
 * - The limbo is collected (entries whose counts are all 0 are freed) by the engine's out-of-memory chain (this
 *   object is the runtime's `IpcCollector`), at every release of a sent DataPtr, and on `collect()`
 *   (`ipcCollect(rt)`). Collection also reclaims the references of consumer processes that died
 *   (`RefCounterFiles#reclaimDead`), except inside the out-of-memory chain's hot path where that scan is skipped
 *   when the limbo is empty.
 * - `limboBytes` is what waits; the runtime's allocators report it as `limbo_bytes` in `memoryStats()`.
 *
 * Invariants: every SentData this object made is in exactly one state: live (producer storage not released),
 * in the limbo, or freed; limboBytes == Σ byteLength over the limbo.
 */
export class IpcService implements Ipc, SentDataOwner, MemoryReclaimer, Disposable {
  /** The producer's counters: one slot per send. */
  readonly counters: RefCounterFiles;
  /** The consumer's side of counters this runtime receives. */
  readonly client: RefCounterClient;
  readonly limboWarningBytes: number;
  readonly #limbo = new Limbo();
  #warned = false;
  #disposed = false;

  constructor(options: IpcOptions = {}) {
    const warningBytes = options.limboWarningBytes ?? 2 ** 30;
    if (typeof warningBytes !== 'number' || Number.isNaN(warningBytes) || warningBytes < 0) {
      throw new InvalidArgumentError('options.limboWarningBytes', warningBytes, 'a byte count ≥ 0, or Infinity');
    }
    this.limboWarningBytes = warningBytes;
    this.counters = new RefCounterFiles(options.slotsPerFile === undefined ? {} : { slotsPerFile: options.slotsPerFile });
    this.client = new RefCounterClient();
  }

  /** Bytes of allocations released by the producer and still referenced by a consumer, on `device` or all devices. */
  limboBytes(device?: Device): number {
    return this.#limbo.bytes(device);
  }

  /** Allocations in the limbo. */
  get limboSize(): number {
    return this.#limbo.size;
  }

  /**
   * One send of `storage`: takes ownership of its DataPtr (the first time) and returns a fresh counter slot,
   * already incremented, for the descriptor. The storage stays the producer's to use and release.
   * @throws InvalidArgumentError for something that is not a StorageImpl, a storage under LMS (it could be paged
   *   out under a consumer), or a pointer no allocator owns (a COW storage, an imported buffer, a received
   *   storage: clone it into a storage of this runtime first); UseAfterReleaseError for a released storage;
   *   ForeignPointerError for a storage another runtime's IPC sent; DisposedError after dispose
   */
  send(storage: StorageImpl): CounterSlot {
    if (this.#disposed) throw new DisposedError('Ipc.send() was called after the runtime was disposed.');
    if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl (or a TensorImpl, whose storage is sent)');
    if (storage.isReleased) throw new UseAfterReleaseError('Cannot send a released storage.');
    if (storage.lms !== null) {
      throw new InvalidArgumentError('storage', 'a storage under LMS', 'a storage LMS does not manage (a paged-out storage cannot be read by a consumer); make it in a runtime without lms() for that device');
    }
    const ptr = storage.peekDataPtr();
    const sent = this.#own(ptr);
    const slot = this.counters.allocate();
    this.counters.increment(slot);
    sent.slots.push(slot);
    return slot;
  }

  /**
   * Collects the limbo: frees every allocation (on `device`, or on every device) whose counters are all 0, after
   * reclaiming the references of consumer processes that died. Returns the bytes freed.
   */
  collect(device?: Device): number {
    if (this.#disposed) return 0;
    if (this.#limbo.size > 0) this.counters.reclaimDead();
    return this.#collect(device);
  }

  /** MemoryReclaimer (the engine's out-of-memory chain, as the runtime's IpcCollector). */
  reclaim(device: Device): number {
    return this.collect(device);
  }

  /** SentDataOwner: the producer's storage released a sent DataPtr. */
  producerReleased(sent: SentData): void {
    sent.released = true;
    if (this.#disposed || this.#unreferenced(sent)) this.#free(sent);
    else {
      this.#limbo.add(sent);
      this.#checkWarning();
    }
    this.#collect(); // Every free of a shared block collects (PyTorch: CudaIPCSentData's destructor).
  }

  /**
   * Frees what the limbo holds whatever its counts (the runtime is going away: its allocators free their
   * memory anyway) and closes the counter files. Idempotent.
   */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const sent of this.#limbo.entries()) this.#free(sent);
    this.client.close();
    this.counters.close();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** The SentData of `ptr`, taking ownership of it the first time it is sent. */
  #own(ptr: DataPtr): SentData {
    if (ptr.deleter === sentDeleter) {
      const sent = ptr.context as SentData;
      if (sent.owner !== this) throw new ForeignPointerError('This storage was sent through another runtime\'s IPC; send it from the runtime that made it.');
      return sent;
    }
    if (!isAllocatorDeleter(ptr.deleter)) {
      throw new InvalidArgumentError(
        'storage',
        'a storage whose memory no allocator owns (a received, COW or imported storage)',
        "a storage its runtime's allocator made: a received storage cannot be sent on (its producer frees it); copy it into a new storage of this runtime and send that",
      );
    }
    const sent: SentData = {
      owner: this,
      device: ptr.device,
      byteLength: ptr.byteLength,
      ptr,
      originalDeleter: ptr.deleter,
      originalContext: ptr.context,
      slots: [],
      released: false,
      freed: false,
    };
    if (!ptr.compareExchangeDeleter(sent.originalDeleter, sentDeleter, sent)) {
      throw new InvalidArgumentError('storage', 'a storage whose pointer changed owner while being sent', 'a storage no other thread is converting');
    }
    return sent;
  }

  #collect(device?: Device): number {
    let freed = 0;
    for (const sent of this.#limbo.entries(device)) {
      if (!this.#unreferenced(sent)) continue;
      this.#limbo.delete(sent);
      this.#free(sent);
      freed += sent.byteLength;
    }
    if (freed > 0) this.#checkWarning();
    return freed;
  }

  /** True when every slot of `sent` is at count 0 (or the counters are gone). */
  #unreferenced(sent: SentData): boolean {
    if (this.#disposed) return true;
    return sent.slots.every((slot) => this.counters.count(slot) === 0);
  }

  #free(sent: SentData): void {
    this.#limbo.delete(sent);
    if (sent.freed) return;
    sent.freed = true;
    if (this.#disposed) {
      try {
        sent.originalDeleter?.(sent.originalContext);
      } catch {
        // The runtime disposed its allocators first: their memory is gone with them.
      }
      return;
    }
    for (const slot of sent.slots) this.counters.done(slot);
    sent.originalDeleter?.(sent.originalContext);
  }

  #checkWarning(): void {
    const bytes = this.#limbo.bytes();
    if (bytes <= this.limboWarningBytes) {
      this.#warned = false;
      return;
    }
    if (this.#warned) return;
    this.#warned = true;
    const devices = [...new Set(this.#limbo.entries().map((s) => formatDevice(s.device)))].join(', ');
    process.emitWarning(
      `The IPC limbo holds ${bytes} bytes (${this.#limbo.size} allocations on ${devices}), over the ${this.limboWarningBytes}-byte threshold: ` +
        'consumers still hold storages whose producer released them; release received storages sooner (release() or using).',
      { type: 'StowageIpcWarning', code: LIMBO_WARNING_CODE },
    );
  }
}

/** A runtime's IPC: the producer's sent data, counters and limbo, and the consumer's counter client. */
export interface Ipc {
  readonly counters: RefCounterFiles;
  readonly client: RefCounterClient;
  readonly limboWarningBytes: number;
  /** Bytes in the limbo, on `device` or on every device. */
  limboBytes(device?: Device): number;
  /** Allocations in the limbo. */
  readonly limboSize: number;
  /** One send of `storage`: see {@link IpcService.send}. */
  send(storage: StorageImpl): CounterSlot;
  /** Collects the limbo; returns the bytes freed. See {@link IpcService.collect}. */
  collect(device?: Device): number;
  dispose(): void;
}

/** The runtime's IPC service (registered by `ipc()`). */
export const Ipc: Token<Ipc> = Symbol('stowage.Ipc');

const ALLOCATOR_DELETER = Symbol.for('stowage.allocatorDeleter');

/** Core's mark on the deleter of a Stowage allocator (a registered symbol, the same in every copy of core). */
function isAllocatorDeleter(deleter: unknown): boolean {
  return typeof deleter === 'function' && (deleter as unknown as Record<symbol, unknown>)[ALLOCATOR_DELETER] === true;
}
