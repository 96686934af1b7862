import { MessageChannel } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';

import type { DataPtr, Device, Runtime } from '@stowage/core';
import type { MemoryReclaimer } from '@stowage/core/plugin-kit';
import { DisposedError, ForeignPointerError, formatDevice, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import { isAllocatorDeleter } from '@stowage/core/plugin-kit';

import type { CudaExport, CudaIpcAllocator } from '../cuda/CudaIpcAllocator.js';
import { closeFds } from '../cuda/descriptorFds.js';
import type { ReceivedStorage } from '../queue/ReceivedStorage.js';
import { isReceivedDataPtr } from '../queue/ReceivedStorage.js';
import type { StorageDescriptor } from '../queue/StorageDescriptor.js';
import { Receiver } from '../received/Receiver.js';
import type { CounterSlot } from '../refcount/CounterSlot.js';
import type { RefCounterClient } from '../refcount/RefCounterClient.js';
import { RefCounterFiles } from '../refcount/RefCounterFiles.js';
import type { Ipc, IpcOptions } from './Ipc.js';
import { LIMBO_WARNING_CODE } from './Ipc.js';
import { Limbo } from './Limbo.js';
import type { IpcEvent, IpcEvents, IpcEventSource } from './IpcEvents.js';
import { IpcEmitter } from './IpcEvents.js';
import type { SentData, SentDataOwner } from './SentData.js';
import { sentDeleter } from './SentData.js';

// Note [Dead consumers]
// A consumer that dies holding references must not pin the producer's memory forever (PyTorch: pytorch#19904).
// Each counter slot records its holder (pid, threadId). `collect()` runs `RefCounterFiles#reclaimDead` with the
// worker threads known to have ended, and a timer (unref'd: it never keeps the process alive) runs `collect()`
// every `deadCheckIntervalMs` while the limbo is not empty, so the memory of a consumer that died comes back within
// about a second without any call from the program. Processes are checked with `kill(pid, 0)`. Threads of this
// process cannot be probed: each StorageQueue over a MessagePort sends the other end a *liveness port* (one end of
// a fresh MessageChannel whose other end the sender's IPC keeps, unref'd, and never closes), and the receiving
// end's IPC takes the sender's threadId as ended when that port's 'close' arrives (the thread's ports close with
// it). The liveness ports are never closed explicitly (not even by dispose): two runtimes in one thread would
// otherwise reclaim each other's references.

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
 * - The consumer's side (what other threads and processes sent this runtime) is its {@link Receiver}'s.
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
  /** The consumer's side: what other threads and processes sent this runtime. */
  readonly #receiver: Receiver;
  readonly #emitter = new IpcEmitter();
  readonly events: IpcEventSource = this.#emitter;
  #warned = false;
  #disposed = false;
  /** Every SentData not yet freed (live or in the limbo). */
  readonly #sent = new Set<SentData>();
  /** Worker threads of this process that ended (their liveness port closed): Note [Dead consumers]. */
  readonly #endedThreads = new Set<number>();
  /** Liveness ports of other threads being watched, by threadId. */
  readonly #watched = new Map<number, MessagePort>();
  /** This thread's ends of the liveness ports it sent (kept, never closed). */
  readonly #livenessPorts: MessagePort[] = [];
  readonly #timer: ReturnType<typeof setInterval> | undefined;
  /** File descriptors of CUDA exports sent and not yet taken by their consumer, by slot (`file#slot`): Note [CUDA over IPC]. */
  readonly #exportedFds = new Map<string, readonly number[]>();

  constructor(options: IpcOptions = {}) {
    const warningBytes = options.limboWarningBytes ?? 2 ** 30;
    if (typeof warningBytes !== 'number' || Number.isNaN(warningBytes) || warningBytes < 0) {
      throw new InvalidArgumentError('options.limboWarningBytes', warningBytes, 'a byte count ≥ 0, or Infinity');
    }
    this.limboWarningBytes = warningBytes;
    this.counters = new RefCounterFiles(options.slotsPerFile === undefined ? {} : { slotsPerFile: options.slotsPerFile });
    this.#receiver = new Receiver((ptr, bytes) => this.#emit('received', { device: ptr.device, address: ptr.address, bytes }));
    this.client = this.#receiver.client;
    const interval = options.deadCheckIntervalMs ?? 1000;
    if (!Number.isFinite(interval) || interval < 0) throw new InvalidArgumentError('options.deadCheckIntervalMs', interval, 'milliseconds ≥ 0 (0: no timer)');
    if (interval > 0) {
      this.#timer = setInterval(() => this.#checkDead(), interval);
      this.#timer.unref();
    }
  }

  /**
   * A liveness port for another thread (Note [Dead consumers]): when this thread ends, the port's other end gets
   * 'close'. The caller transfers it; this side's end stays open for the thread's life.
   */
  livenessPort(): MessagePort {
    const { port1, port2 } = new MessageChannel();
    port1.unref();
    this.#livenessPorts.push(port1);
    return port2;
  }

  /** Watches another thread's liveness port: when it closes, `threadId` counts as ended (its references reclaimed). */
  watchThread(threadId: number, port: MessagePort): void {
    if (this.#disposed || this.#watched.has(threadId) || this.#endedThreads.has(threadId)) {
      port.close();
      return;
    }
    this.#watched.set(threadId, port);
    port.once('close', () => {
      this.#watched.delete(threadId);
      this.threadEnded(threadId);
    });
    port.start();
    port.unref();
  }

  /** Says that worker thread `threadId` of this process ended: its references are reclaimed at the next collection, which runs now. */
  threadEnded(threadId: number): void {
    this.#endedThreads.add(threadId);
    this.collect();
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
    this.#emit('sent', { device: sent.device, address: ptr.address, bytes: sent.byteLength });
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
   * reclaiming the references of consumer processes that died, and unmaps the consumer's idle mappings (Note [Idle
   * mappings] in SharedMappings.ts). Returns the bytes freed.
   */
  collect(device?: Device): number {
    if (this.#disposed) return 0;
    this.#receiver.closeIdleMappings();
    if (this.#limbo.size > 0) this.counters.reclaimDead(this.#endedThreads);
    return this.#collect(device);
  }

  /** Makes a storage of a descriptor another thread put: see {@link Receiver.receive}. */
  receive(rt: Runtime, descriptor: StorageDescriptor): ReceivedStorage {
    return this.#receiver.receive(rt, descriptor);
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

  /** Gives back a descriptor's reference without making a storage: see {@link Receiver.dropReference}. */
  dropReference(slot: CounterSlot): void {
    this.#receiver.dropReference(slot);
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
      this.#emit('enteredLimbo', { device: sent.device, address: sent.ptr.address, bytes: sent.byteLength });
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
    if (this.#timer !== undefined) clearInterval(this.#timer);
    for (const port of this.#watched.values()) port.close();
    for (const fds of this.#exportedFds.values()) closeFds(fds);
    this.#exportedFds.clear();
    this.#watched.clear();
    for (const sent of this.#limbo.entries()) this.#free(sent);
    this.#receiver.dispose();
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
    if (isReceivedDataPtr(ptr)) {
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
      this.#emit('collected', { device: sent.device, address: sent.ptr.address, bytes: sent.byteLength });
    }
    if (freed > 0) this.#checkWarning();
    return freed;
  }

  #emit(event: Exclude<keyof IpcEvents, 'listenerFailed'>, e: IpcEvent): void {
    if (this.#emitter.listenerCount(event) > 0) this.#emitter.safeEmit(event, e);
  }

  /** True when every slot of `sent` is at count 0 (or the counters are gone). */
  /**
   * Whether a consumer received (acquired) a reference to `sent` and holds it still. What is in flight does not
   * count: once the counter files are closed with the runtime, a descriptor still in flight cannot be received.
   */
  #received(sent: SentData): boolean {
    if (this.#disposed) return false;
    return sent.slots.some((slot) => this.counters.held(slot) > 0);
  }

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

  /** The timer's tick: Note [Dead consumers]. */
  #checkDead(): void {
    if (this.#disposed || this.#limbo.size === 0) return;
    try {
      this.collect();
    } catch (error) {
      process.emitWarning(`The IPC dead-consumer check failed: ${(error as Error).message}`, { type: 'StowageIpcWarning' });
    }
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
