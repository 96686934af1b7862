import type { DataPtr, Device } from '@stowage/core';
import { DisposedError, ForeignPointerError, formatDevice, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import { isAllocatorDeleter } from '@stowage/core/plugin-kit';

import type { CounterSlot } from '../refcount/CounterSlot.js';
import { RefCounterFiles } from '../refcount/RefCounterFiles.js';
import { closeFds } from '../shm/descriptorFds.js';
import type { CudaExport, CudaIpcAllocator } from '../wire/CudaIpcAllocator.js';
import { Limbo } from './Limbo.js';
import type { SentData, SentDataOwner } from './SentData.js';
import { sentDeleter } from './SentData.js';

/** The `code` of the warning emitted when the limbo passes `limboWarningBytes`. */
export const LIMBO_WARNING_CODE = 'STOWAGE_IPC_LIMBO';

/** What a {@link Sender} reports (IPC's events of the same names), with the allocation it concerns. */
export type SenderEvent = 'sent' | 'enteredLimbo' | 'collected';

/** Options of a {@link Sender}. */
export interface SenderOptions {
  /** `process.emitWarning` when the limbo grows past this many bytes. Default 1 GiB; `Infinity` never warns. */
  readonly limboWarningBytes?: number;
  /** Counters per ref-counter file. Default 4096. */
  readonly slotsPerFile?: number;
  /**
   * Tells a pointer this runtime received from another thread or process (the consumer's mark): `send` refuses it
   * with a message of its own (its producer frees it). Default: none is.
   */
  readonly isReceived?: (ptr: DataPtr) => boolean;
  /** Told of each send, limbo entry and collection, once the sender's state is consistent. */
  readonly report?: (event: SenderEvent, e: { readonly device: Device; readonly address: number; readonly bytes: number }) => void;
}

/**
 * The producer's side of a runtime's IPC (after PyTorch's CUDA IPC refcounting, reference 002/003):
 * - `send(storage)` takes ownership of the storage's DataPtr with `compareExchangeDeleter` (its allocator's
 *   deleter and context move into a {@link SentData}), hands out a counter slot and increments it. Each send gets
 *   its own slot (one slot, one holder: RefCounterClient).
 * - When the producer releases its storage, the sent deleter runs: with every slot at count 0 the allocation is
 *   freed through the displaced deleter and its slots are `done()`; otherwise it moves to the limbo.
 * - The limbo is collected (entries whose counts are all 0 are freed) at every release of a sent DataPtr and on
 *   `collect()`, which the runtime's IPC calls from the engine's out-of-memory chain, from `ipcCollect(rt)`, when
 *   a consumer thread ended, and from its dead-consumer timer. `collect()` also reclaims the references of consumers that died
 *   (`RefCounterFiles#reclaimDead`: Note [Dead consumers] in ThreadLiveness.ts) when the limbo is not empty.
 * - An expandable CUDA segment's file descriptors stay open until the consumer took them (`exportTaken`) or the
 *   slot is done (Note [CUDA over IPC] in consumer/Receiver.ts).
 * - `limboBytes` is what waits; the runtime's allocators report it as `limbo_bytes` in `memoryStats()`.
 *
 * Invariants: every SentData this object made is in exactly one state: live (producer storage not released),
 * in the limbo, or freed; limboBytes == Σ byteLength over the limbo.
 */
export class Sender implements SentDataOwner, Disposable {
  /** The producer's counters: one slot per send. */
  readonly counters: RefCounterFiles;
  readonly limboWarningBytes: number;
  readonly #limbo = new Limbo();
  readonly #isReceived: (ptr: DataPtr) => boolean;
  readonly #report: NonNullable<SenderOptions['report']> | undefined;
  #warned = false;
  #disposed = false;
  /** Every SentData not yet freed (live or in the limbo). */
  readonly #sent = new Set<SentData>();
  /** File descriptors of CUDA exports sent and not yet taken by their consumer, by slot (`file#slot`): Note [CUDA over IPC]. */
  readonly #exportedFds = new Map<string, readonly number[]>();

  /** @throws InvalidArgumentError for a bad `limboWarningBytes` or `slotsPerFile` */
  constructor(options: SenderOptions = {}) {
    const warningBytes = options.limboWarningBytes ?? 2 ** 30;
    if (typeof warningBytes !== 'number' || Number.isNaN(warningBytes) || warningBytes < 0) {
      throw new InvalidArgumentError('options.limboWarningBytes', warningBytes, 'a byte count ≥ 0, or Infinity');
    }
    this.limboWarningBytes = warningBytes;
    this.counters = new RefCounterFiles(options.slotsPerFile === undefined ? {} : { slotsPerFile: options.slotsPerFile });
    this.#isReceived = options.isReceived ?? (() => false);
    this.#report = options.report;
  }

  /**
   * True when the segment `handle` holds an allocation a consumer received and still holds (a sent, unfreed block
   * whose slot a consumer acquired): the shared-memory backend then leaves the segment's name for the last holder to
   * unlink. A block only in flight does not hold its segment: its counters go with the runtime, so it cannot be
   * received any more (get() throws SharedMemoryError ENOENT), and nobody would unlink the name.
   */
  holdsSegment(handle: unknown): boolean {
    if (this.#disposed) return false;
    for (const sent of this.#sent) {
      if (sent.ptr.handle === handle && this.#received(sent)) return true;
    }
    return false;
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
    this.#retireFinished(sent);
    const slot = this.counters.allocate();
    this.counters.increment(slot);
    sent.slots.push(slot);
    this.#report?.('sent', { device: sent.device, address: ptr.address, bytes: sent.byteLength });
    return slot;
  }

  /**
   * Finishes the oldest slots of `sent` whose count is back at 0 (their consumers released them): `done()`, and out
   * of the list. A slot's count never rises again once it is 0 (each send takes a fresh slot), so a storage sent
   * over and over (weights shared every step) keeps only the slots its consumers still hold, and its counter files
   * fill up and are unlinked instead of piling up in /dev/shm. Oldest first, as consumers mostly release in order:
   * amortized O(1) a send.
   */
  #retireFinished(sent: SentData): void {
    const slots = sent.slots;
    let finished = 0;
    while (finished < slots.length && this.counters.count(slots[finished]!) === 0) finished++;
    if (finished === 0) return;
    for (const slot of slots.splice(0, finished)) {
      this.exportTaken(slot);
      this.counters.done(slot);
    }
  }

  /**
   * One send of a CUDA storage (Note [CUDA over IPC]): exports its block with `exporter` (the storage's
   * CudaAllocator) and sends it as `send` does. An expandable segment's file descriptors stay open here until the
   * consumer says it took them (`exportTaken`) or the slot is done.
   * @throws what `send` throws; InvalidArgumentError or CudaError from the export
   */
  sendCuda(storage: StorageImpl, exporter: CudaIpcAllocator): { slot: CounterSlot; exported: CudaExport } {
    if (this.#disposed) throw new DisposedError('Ipc.send() was called after the runtime was disposed.');
    if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl (or a TensorImpl, whose storage is sent)');
    if (storage.isReleased) throw new UseAfterReleaseError('Cannot send a released storage.');
    const ptr = storage.peekDataPtr();
    if (ptr.deleter !== sentDeleter) this.#checkOwnable(ptr);
    const exported = this.#withOwnDeleter(ptr, () => exporter.exportIpc(ptr));
    let slot: CounterSlot;
    try {
      slot = this.send(storage);
    } catch (error) {
      if (exported.kind === 'shareable') closeFds(exported.fds);
      throw error;
    }
    if (exported.kind === 'shareable') this.#exportedFds.set(slotKey(slot), exported.fds);
    return { slot, exported };
  }

  /** The consumer took the file descriptors of the export sent with `slot` (an `ipc.ack`): closes this side's copies. */
  exportTaken(slot: Pick<CounterSlot, 'file' | 'slot'>): void {
    const key = slotKey(slot);
    const fds = this.#exportedFds.get(key);
    if (fds === undefined) return;
    this.#exportedFds.delete(key);
    closeFds(fds);
  }

  /**
   * Collects the limbo: frees every allocation (on `device`, or on every device) whose counters are all 0, after
   * reclaiming, when the limbo is not empty, the references of consumer processes that died and of the worker
   * threads in `endedThreads`. Returns the bytes freed; 0 after dispose.
   */
  collect(device: Device | undefined, endedThreads: ReadonlySet<number>): number {
    if (this.#disposed) return 0;
    if (this.#limbo.size > 0) this.counters.reclaimDead(endedThreads);
    return this.#collect(device);
  }

  /** Runs `fn` with `ptr`'s allocator deleter in place (its owner checks it), when `ptr` was sent before. */
  #withOwnDeleter<T>(ptr: DataPtr, fn: () => T): T {
    if (ptr.deleter !== sentDeleter) return fn();
    const sent = ptr.context as SentData;
    if (sent.owner !== this) throw new ForeignPointerError('This storage was sent through another runtime\'s IPC; send it from the runtime that made it.');
    ptr.compareExchangeDeleter(sentDeleter, sent.originalDeleter, sent.originalContext);
    try {
      return fn();
    } finally {
      ptr.compareExchangeDeleter(sent.originalDeleter, sentDeleter, sent);
    }
  }

  /** SentDataOwner: the producer's storage released a sent DataPtr. */
  producerReleased(sent: SentData): void {
    sent.released = true;
    if (this.#disposed || this.#unreferenced(sent)) this.#free(sent);
    else {
      this.#limbo.add(sent);
      this.#report?.('enteredLimbo', { device: sent.device, address: sent.ptr.address, bytes: sent.byteLength });
      this.#checkWarning();
    }
    this.#collect(); // Every free of a shared block collects (PyTorch: CudaIPCSentData's destructor).
  }

  /**
   * Closes the descriptors of exports not yet taken, frees what the limbo holds whatever its counts (the runtime is
   * going away: its allocators free their memory anyway) and closes the counter files. Idempotent.
   */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const fds of this.#exportedFds.values()) closeFds(fds);
    this.#exportedFds.clear();
    for (const sent of this.#limbo.entries()) this.#free(sent);
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
    this.#checkOwnable(ptr);
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
    this.#sent.add(sent);
    return sent;
  }

  /** @throws InvalidArgumentError for a received pointer, or one no allocator owns */
  #checkOwnable(ptr: DataPtr): void {
    if (this.#isReceived(ptr)) {
      throw new InvalidArgumentError(
        'storage',
        'a received storage',
        'a storage this runtime made: a received storage cannot be sent on, since its producer frees it and counts only its own consumers; copy it into a new storage (rt.storage(n, { shared: true }) + copyData) and send the copy',
      );
    }
    if (!isAllocatorDeleter(ptr.deleter)) {
      throw new InvalidArgumentError(
        'storage',
        'a storage whose memory no allocator owns (a received, COW or imported storage)',
        "a storage its runtime's allocator made: a received storage cannot be sent on (its producer frees it); copy it into a new storage of this runtime and send that",
      );
    }
  }

  #collect(device?: Device): number {
    let freed = 0;
    for (const sent of this.#limbo.entries(device)) {
      if (!this.#unreferenced(sent)) continue;
      this.#limbo.delete(sent);
      this.#free(sent);
      freed += sent.byteLength;
      this.#report?.('collected', { device: sent.device, address: sent.ptr.address, bytes: sent.byteLength });
    }
    if (freed > 0) this.#checkWarning();
    return freed;
  }

  /**
   * Whether a consumer received (acquired) a reference to `sent` and holds it still. What is in flight does not
   * count: once the counter files are closed with the runtime, a descriptor still in flight cannot be received.
   */
  #received(sent: SentData): boolean {
    if (this.#disposed) return false;
    return sent.slots.some((slot) => this.counters.held(slot) > 0);
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
    this.#sent.delete(sent);
    if (this.#disposed) {
      try {
        sent.originalDeleter?.(sent.originalContext);
      } catch {
        // The runtime disposed its allocators first: their memory is gone with them.
      }
      return;
    }
    for (const slot of sent.slots) {
      this.exportTaken(slot);
      this.counters.done(slot);
    }
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

const slotKey = (slot: Pick<CounterSlot, 'file' | 'slot'>): string => `${slot.file}#${slot.slot}`;
