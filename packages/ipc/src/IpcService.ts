import type { MessagePort } from 'node:worker_threads';

import { MessagePort as WorkerMessagePort } from 'node:worker_threads';

import type { Device, StorageImpl, Token } from '@stowage/core';
import type { MemoryReclaimer } from '@stowage/core/plugin-kit';
import { InvalidArgumentError, Runtime } from '@stowage/core';

import { isReceivedDataPtr } from './consumer/ReceivedStorage.js';
import type { ReceivedStorage } from './consumer/ReceivedStorage.js';
import { Receiver } from './consumer/Receiver.js';
import type { IpcEvent, IpcEvents, IpcEventSource } from './IpcEvents.js';
import { SafeEmitter } from '@stowage/core/plugin-kit';
import { Sender } from './producer/Sender.js';
import { ThreadLiveness } from './producer/ThreadLiveness.js';
import type { CounterSlot } from './refcount/CounterSlot.js';
import type { RefCounterClient } from './refcount/RefCounterClient.js';
import type { RefCounterFiles } from './refcount/RefCounterFiles.js';
import type { CudaExport, CudaIpcAllocator } from './wire/CudaIpcAllocator.js';
import type { StorageDescriptor } from './wire/StorageDescriptor.js';
import { checkStorageDescriptor } from './wire/StorageDescriptor.js';

/** Options of the `ipc()` plugin. */
export interface IpcOptions {
  /**
   * `process.emitWarning` when the limbo grows past this many bytes (once per crossing; again after it fell back
   * to the threshold or below). Default 1 GiB; `Infinity` never warns.
   */
  readonly limboWarningBytes?: number;
  /** Counters per ref-counter file (RefCounterFiles' `slotsPerFile`). Default 4096. */
  readonly slotsPerFile?: number;
  /**
   * How often, in milliseconds, the dead-consumer check runs while the limbo is not empty (an unref'd timer:
   * Note [Dead consumers] in producer/ThreadLiveness.ts). Default 1000; 0 turns the timer off (collections still
   * run the check).
   */
  readonly deadCheckIntervalMs?: number;
}

/**
 * A runtime's IPC (registered by `ipc()`; `ipcOf(rt)` finds it): the producer's side (sends, counter files, the
 * limbo) and the consumer's side (received storages, the counter client) of sharing storages with other threads
 * and processes. `StorageQueue` is its usual caller; a program calls `collect()` (`ipcCollect(rt)`) and listens to
 * `events`.
 */
export interface Ipc {
  /**
   * The producer's ref-counter files (one slot per send), the same object the container holds under
   * `RefCounterFiles`. For tests and tools that read counts; a program does not need it. Closed (every file
   * unlinked) by `dispose()`, after which its allocating members throw DisposedError.
   */
  readonly counters: RefCounterFiles;
  /**
   * The consumer's counter client: it acquires the slot of each received descriptor and releases it when the
   * received storage is released. For tests and tools; closed by `dispose()`, which gives back what it holds.
   */
  readonly client: RefCounterClient;
  /** The limbo's warning threshold in bytes, from the options (default 1 GiB; `Infinity`: never warns). */
  readonly limboWarningBytes: number;
  /**
   * Sends, receives, limbo entries and collections, as they happen (for traces and the memory page). Listeners run
   * after IPC's state is consistent; one that throws is reported as `listenerFailed` and IPC goes on.
   */
  readonly events: IpcEventSource;
  /**
   * Bytes of allocations this runtime's producer released while a consumer still holds them (the limbo), on
   * `device` or, without one, on every device; 0 for a device with nothing there. Does not throw.
   */
  limboBytes(device?: Device): number;
  /** How many allocations are in the limbo (a count, not bytes). Does not throw. */
  readonly limboSize: number;
  /**
   * One send of `storage`: takes ownership of its DataPtr the first time (its allocator's deleter moves aside, and
   * the storage's release then frees it or moves it to the limbo) and returns a fresh counter slot, already at
   * count 1, for the descriptor. The storage stays the producer's to use and release. Emits `sent`.
   * @throws InvalidArgumentError for something that is not a StorageImpl, a storage under LMS (it could be paged
   *   out under a consumer), a received storage (copy it into a storage of this runtime first), or a pointer no
   *   allocator owns (a COW storage, an imported buffer); UseAfterReleaseError for a released storage;
   *   ForeignPointerError for a storage another runtime's IPC sent; DisposedError after dispose. Nothing is sent
   *   when it throws.
   */
  send(storage: StorageImpl): CounterSlot;
  /**
   * One send of a CUDA storage (Note [CUDA over IPC] in consumer/Receiver.ts): exports its block with `exporter`
   * (the IpcExporter service of the storage's device) and sends it as `send` does; returns the slot and the export
   * for the descriptor. An expandable segment's file descriptors stay open here until `exportTaken(slot)`, the
   * slot's end or dispose. Precondition: `exporter` is the allocator that made the storage's block.
   * @throws what `send` throws; InvalidArgumentError or CudaError from the export. Nothing is sent, and no
   *   descriptor left open, when it throws.
   */
  sendCuda(storage: StorageImpl, exporter: CudaIpcAllocator): { slot: CounterSlot; exported: CudaExport };
  /**
   * The consumer took the file descriptors of the CUDA export sent with `slot` (its `ipc.ack`): closes this side's
   * copies. A slot with none open (a host storage, an ack already seen, a finished slot) is ignored.
   * @throws InvalidArgumentError for something that is not a `{ file, slot }`
   */
  exportTaken(slot: Pick<CounterSlot, 'file' | 'slot'>): void;
  /**
   * Makes a storage of `descriptor`, which another thread or process put: acquires its counter slot, wraps the
   * memory zero copy (a SharedArrayBuffer range, a mapped POSIX shared-memory object, or a CUDA export opened with
   * `rt`'s CUDA allocator) in a StorageImpl of `rt` (and a TensorImpl for a tensor), watched by the
   * forgotten-release safety net. Its release gives the reference back. Emits `received`. Preconditions: the
   * descriptor was not put by this thread; `rt` is this IPC's runtime.
   * @throws InvalidArgumentError for an `rt` that is not a Runtime or a descriptor `checkStorageDescriptor` refuses;
   *   DisposedError after dispose; what RefCounterClient#acquire throws (InvalidArgumentError for a slot out
   *   of range or received twice, ForeignPointerError for a forged nonce, UseAfterReleaseError for a finished slot,
   *   SharedMemoryError ENOENT when the counter file is gone); SharedMemoryError when the shared-memory object cannot
   *   be mapped (ENOENT: its producer freed it); InvalidArgumentError when the object of that name is another one or
   *   too small, or for a tensor layout that does not fit. For CUDA memory: BackendUnavailableError or
   *   InvalidArgumentError when `rt` has no cuda() plugin for the device or it offers no IpcExporter,
   *   UseAfterReleaseError when the producer process exited, SharedMemoryError from `pidfd_getfd` (EPERM: no ptrace
   *   access), CudaError from the open. Nothing is held when it throws.
   */
  receive(rt: Runtime, descriptor: StorageDescriptor): ReceivedStorage;
  /**
   * Gives back the reference a descriptor carries without making a storage of it (a descriptor refused, or left
   * unread in a closed queue): acquires and releases `slot`. Best effort: a forged or stale slot, or a call after
   * dispose, does nothing. Does not throw.
   */
  dropReference(slot: CounterSlot): void;
  /**
   * Collects the limbo now: unmaps the consumer's idle mappings (Note [Idle mappings] in consumer/SharedMappings.ts),
   * reclaims the references of consumers that died when the limbo is not empty (Note [Dead consumers]), and frees
   * every limbo allocation on `device` (or on every device) whose counters are all 0, emitting `collected` for
   * each. Returns the bytes freed; 0 after dispose.
   * @throws SharedMemoryError only when a system call of the dead-consumer check fails unexpectedly
   */
  collect(device?: Device): number;
  /**
   * A new liveness port to transfer to another thread (a StorageQueue posts it in its `ipc.hello`): this side keeps
   * the other end open, unref'd, until the thread ends, and the receiving thread's IPC then learns that this thread
   * ended (Note [Dead consumers]). Does not throw.
   */
  livenessPort(): MessagePort;
  /**
   * Watches `port`, the liveness port of worker thread `threadId` of this process: when it closes, the thread counts
   * as ended (`threadEnded`). Precondition: `port` came from `livenessPort()` of that thread's IPC. A second port
   * for a watched thread, one for a thread already ended, or one given after dispose is closed at once.
   * @throws InvalidArgumentError, watching nothing, for a threadId that is not an integer ≥ 0 or a port that is not a
   *   MessagePort
   */
  watchThread(threadId: number, port: MessagePort): void;
  /**
   * Says that worker thread `threadId` of this process ended: the references it acquired are reclaimed at the next
   * collection, which runs now. Saying it of a thread still running takes its references from under it: its later
   * releases throw, and the producer may free memory that thread still reads (undefined behaviour).
   * @throws InvalidArgumentError, changing nothing, for a threadId that is not an integer ≥ 0; what `collect` throws
   */
  threadEnded(threadId: number): void;
  /**
   * True when the segment `handle` (a memory backend's segment handle) holds an allocation sent by this runtime that
   * a consumer received and still holds; the shared-memory backend then leaves the segment's name for the last
   * holder to unlink. A block only in flight does not count. False after dispose. Does not throw.
   */
  holdsSegment(handle: unknown): boolean;
  /**
   * Frees the limbo whatever its counts (the runtime's allocators are going away), unlinks the counter files, gives
   * back every reference received storages still hold and unmaps their memory, and stops the dead-consumer timer.
   * Idempotent; the runtime's container calls it at the runtime's dispose. Afterwards `send`, `sendCuda` and
   * `receive` throw DisposedError, `collect` returns 0 and `dropReference` does nothing.
   */
  dispose(): void;
}

/** The runtime's IPC service (registered by `ipc()`). */
export const Ipc: Token<Ipc> = Symbol('stowage.Ipc');

/**
 * The runtime's `Ipc`: composes the producer's {@link Sender} (sends, counters, limbo), the consumer's
 * {@link Receiver} (received storages, mappings, counter client) and the {@link ThreadLiveness} of other threads,
 * reports both sides' events on one emitter, and runs the dead-consumer timer (Note [Dead consumers]). It is the
 * runtime's `IpcCollector` too: the engine's out-of-memory chain calls `reclaim(device)`.
 *
 * Invariants: counters == the sender's counters and client == the receiver's client; after dispose, the sender,
 * the receiver and the liveness are disposed and no timer runs.
 */
export class IpcService implements Ipc, MemoryReclaimer, Disposable {
  readonly counters: RefCounterFiles;
  readonly client: RefCounterClient;
  readonly limboWarningBytes: number;
  readonly #emitter = new SafeEmitter<IpcEvents>();
  readonly events: IpcEventSource = this.#emitter;
  readonly #sender: Sender;
  readonly #receiver: Receiver;
  readonly #liveness = new ThreadLiveness();
  readonly #timer: ReturnType<typeof setInterval> | undefined;
  #disposed = false;

  /** @throws InvalidArgumentError for a bad option value */
  constructor(options: IpcOptions = {}) {
    this.#sender = new Sender({
      ...(options.limboWarningBytes === undefined ? {} : { limboWarningBytes: options.limboWarningBytes }),
      ...(options.slotsPerFile === undefined ? {} : { slotsPerFile: options.slotsPerFile }),
      isReceived: isReceivedDataPtr,
      report: (event, e) => this.#emit(event, e),
    });
    this.counters = this.#sender.counters;
    this.limboWarningBytes = this.#sender.limboWarningBytes;
    this.#receiver = new Receiver((ptr, bytes) => this.#emit('received', { device: ptr.device, address: ptr.address, bytes }));
    this.client = this.#receiver.client;
    const interval = options.deadCheckIntervalMs ?? 1000;
    if (!Number.isFinite(interval) || interval < 0) throw new InvalidArgumentError('options.deadCheckIntervalMs', interval, 'milliseconds ≥ 0 (0: no timer)');
    if (interval > 0) {
      this.#timer = setInterval(() => this.#checkDead(), interval);
      this.#timer.unref();
    }
  }

  livenessPort(): MessagePort {
    return this.#liveness.port();
  }

  watchThread(threadId: number, port: MessagePort): void {
    checkThreadId(threadId);
    if (!(port instanceof WorkerMessagePort)) throw new InvalidArgumentError('port', port, "a worker_threads MessagePort: the thread's liveness port (Ipc#livenessPort of its IPC)");
    this.#liveness.watch(threadId, port, () => this.threadEnded(threadId));
  }

  threadEnded(threadId: number): void {
    checkThreadId(threadId);
    this.#liveness.markEnded(threadId);
    this.collect();
  }

  holdsSegment(handle: unknown): boolean {
    return this.#sender.holdsSegment(handle);
  }

  limboBytes(device?: Device): number {
    return this.#sender.limboBytes(device);
  }

  get limboSize(): number {
    return this.#sender.limboSize;
  }

  send(storage: StorageImpl): CounterSlot {
    return this.#sender.send(storage);
  }

  sendCuda(storage: StorageImpl, exporter: CudaIpcAllocator): { slot: CounterSlot; exported: CudaExport } {
    return this.#sender.sendCuda(storage, exporter);
  }

  exportTaken(slot: Pick<CounterSlot, 'file' | 'slot'>): void {
    const s = slot as Partial<Record<'file' | 'slot', unknown>> | null;
    if (typeof s !== 'object' || s === null || typeof s.file !== 'string' || !Number.isSafeInteger(s.slot)) {
      throw new InvalidArgumentError('slot', slot, 'a counter slot { file, slot } (a descriptor\'s slot, or an ipc.ack)');
    }
    this.#sender.exportTaken(slot);
  }

  receive(rt: Runtime, descriptor: StorageDescriptor): ReceivedStorage {
    if (!(rt instanceof Runtime)) throw new InvalidArgumentError('rt', rt, 'a Runtime: the runtime of this IPC, whose allocators wrap the received memory');
    checkStorageDescriptor(descriptor);
    return this.#receiver.receive(rt, descriptor);
  }

  dropReference(slot: CounterSlot): void {
    this.#receiver.dropReference(slot);
  }

  collect(device?: Device): number {
    if (this.#disposed) return 0;
    this.#receiver.closeIdleMappings();
    return this.#sender.collect(device, this.#liveness.ended);
  }

  /** MemoryReclaimer (the engine's out-of-memory chain, as the runtime's IpcCollector): collects on `device`. */
  reclaim(device: Device): number {
    return this.collect(device);
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#liveness.dispose();
    this.#sender.dispose();
    this.#receiver.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #emit(event: Exclude<keyof IpcEvents, 'listenerFailed'>, e: IpcEvent): void {
    if (this.#emitter.listenerCount(event) > 0) this.#emitter.safeEmit(event, e);
  }

  /** The timer's tick: Note [Dead consumers]. */
  #checkDead(): void {
    if (this.#disposed || this.#sender.limboSize === 0) return;
    try {
      this.collect();
    } catch (error) {
      process.emitWarning(`The IPC dead-consumer check failed: ${(error as Error).message}`, { type: 'StowageIpcWarning' });
    }
  }
}

/** @throws InvalidArgumentError for a thread id that is not an integer ≥ 0 */
function checkThreadId(threadId: unknown): void {
  if (!Number.isSafeInteger(threadId) || (threadId as number) < 0) throw new InvalidArgumentError('threadId', threadId, "an integer ≥ 0: a worker thread's threadId");
}
