import type { MessagePort } from 'node:worker_threads';

import type { Device, Runtime, StorageImpl, Token } from '@stowage/core';

import type { CudaExport, CudaIpcAllocator } from '../cuda/CudaIpcAllocator.js';
import type { ReceivedStorage } from '../queue/ReceivedStorage.js';
import type { StorageDescriptor } from '../queue/StorageDescriptor.js';
import type { CounterSlot } from '../refcount/CounterSlot.js';
import type { IpcEventSource } from './IpcEvents.js';
import type { RefCounterClient } from '../refcount/RefCounterClient.js';
import type { RefCounterFiles } from '../refcount/RefCounterFiles.js';

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
   * Note [Dead consumers]). Default 1000; 0 turns the timer off (collections still run the check).
   */
  readonly deadCheckIntervalMs?: number;
}

/** The `code` of the warning emitted when a received storage was garbage-collected without its release. */
export const FORGOTTEN_RELEASE_WARNING_CODE = 'STOWAGE_IPC_FORGOTTEN_RELEASE';

/** The `code` of the warning emitted when storages put on a queue were never sent: its transport closed first. */
export const UNSENT_WARNING_CODE = 'STOWAGE_IPC_UNSENT';

/** The `code` of the warning emitted when the limbo passes `limboWarningBytes`. */
export const LIMBO_WARNING_CODE = 'STOWAGE_IPC_LIMBO';

/** A runtime's IPC: the producer's sent data, counters and limbo, and the consumer's counter client. */
export interface Ipc {
  readonly counters: RefCounterFiles;
  readonly client: RefCounterClient;
  readonly limboWarningBytes: number;
  /** Sends, receives, limbo entries and collections, as they happen (for traces and the memory page). */
  readonly events: IpcEventSource;
  /** Bytes in the limbo, on `device` or on every device. */
  limboBytes(device?: Device): number;
  /** Allocations in the limbo. */
  readonly limboSize: number;
  /** One send of `storage`: see {@link IpcService.send}. */
  send(storage: StorageImpl): CounterSlot;
  /** One send of a CUDA storage: see {@link IpcService.sendCuda}. */
  sendCuda(storage: StorageImpl, exporter: CudaIpcAllocator): { slot: CounterSlot; exported: CudaExport };
  /** The consumer took an export's descriptors: see {@link IpcService.exportTaken}. */
  exportTaken(slot: Pick<CounterSlot, 'file' | 'slot'>): void;
  /** Makes a storage of a received descriptor: see {@link Receiver.receive}. */
  receive(rt: Runtime, descriptor: StorageDescriptor): ReceivedStorage;
  /** Gives back a descriptor's reference without making a storage: see {@link Receiver.dropReference}. */
  dropReference(slot: CounterSlot): void;
  /** Collects the limbo; returns the bytes freed. See {@link IpcService.collect}. */
  collect(device?: Device): number;
  /** A liveness port to send to another thread: see {@link IpcService.livenessPort}. */
  livenessPort(): MessagePort;
  /** Watches another thread's liveness port: see {@link IpcService.watchThread}. */
  watchThread(threadId: number, port: MessagePort): void;
  /** Worker thread `threadId` ended: see {@link IpcService.threadEnded}. */
  threadEnded(threadId: number): void;
  /** Whether a consumer still holds memory in a segment: see {@link IpcService.holdsSegment}. */
  holdsSegment(handle: unknown): boolean;
  dispose(): void;
}

/** The runtime's IPC service (registered by `ipc()`). */
export const Ipc: Token<Ipc> = Symbol('stowage.Ipc');
