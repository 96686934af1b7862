import type { EventEmitter } from 'eventemitter3';
import type { AllocatorEvents } from './AllocatorEvents.js';
import type { AllocatorStats } from './AllocatorStats.js';
import type { DataPtr } from '../storage/DataPtr.js';
import type { Device } from './Device.js';
import type { LmsStorage } from './LmsStorage.js';
import type { MemorySnapshot } from './MemorySnapshot.js';
import type { StorageImpl } from '../storage/StorageImpl.js';
import type { Token } from './Token.js';

/**
 * Per-allocation options. An allocator refuses, with InvalidArgumentError and its state unchanged, a value it
 * cannot serve: a `usage` its device has no buffers for (cpu serves only `'storage'`), `shared: true` where memory
 * cannot cross threads, a value of the wrong type. Leaving an option out (or giving its default: `shared: false`,
 * `usage: 'storage'`) is accepted by every allocator, so that device-neutral code can pass them.
 */
export interface AllocateOptions {
  /** cpu: back the allocation with a SharedArrayBuffer so that it can cross worker_threads. */
  readonly shared?: boolean;
  /** Stream (or queue) the allocation is used on; the allocator's default stream when absent. */
  readonly stream?: number;
  /**
   * What the memory is for, for devices whose buffers carry usages (webgpu: `'storage'` (default), `'uniform'`,
   * `'upload'`, `'readback'`; cpu: `'storage'` only). Allocators reject a usage they cannot serve with
   * InvalidArgumentError.
   */
  readonly usage?: string;
}

/** The read side of an allocator's events: only the allocator emits. */
export type AllocatorEventSource = Pick<EventEmitter<AllocatorEvents>, 'on' | 'once' | 'off'>;

/**
 * Allocates and frees device memory for one device. Implement it directly, through {@link makeAllocator}
 * (which supplies validation, bookkeeping, stats, events and snapshots around a minimal core), or as an adaptor
 * over an `upstream` allocator ({@link ForwardingAllocator}). Prove an implementation with
 * `describeAllocatorContract` from `@stowage/core/testing`.
 *
 * What a device can do beyond allocating (page, describe a block, bind, import, export for IPC) is not here: it is
 * a device service, registered per device under a token (Note [Device services]).
 *
 * Every method validates its arguments and throws a `StowageError` subclass with the allocator's state
 * unchanged; after `dispose()` every method but `dispose()` throws `DisposedError`.
 */
export interface Allocator extends Disposable {
  readonly device: Device;
  /** Every DataPtr this allocator returns has `address % alignment === 0`. A power of two. */
  readonly alignment: number;
  readonly events: AllocatorEventSource;

  /**
   * Returns a DataPtr of exactly `nbytes` usable bytes (0 is allowed and returns a distinct empty pointer).
   * Contents are unspecified.
   * @throws InvalidArgumentError when `nbytes` is not an integer in [0, Number.MAX_SAFE_INTEGER]
   * @throws OutOfMemoryError when the device cannot hold it even after the cache was released
   */
  allocate(nbytes: number, options?: AllocateOptions): DataPtr;

  /**
   * Frees a pointer this allocator returned. Equivalent to `ptr.release()` while the allocator still owns the
   * pointer's deleter.
   * @throws DoubleFreeError when `ptr` was already released
   * @throws ForeignPointerError when this allocator did not allocate `ptr` (or COW/IPC took it over)
   */
  free(ptr: DataPtr): void;

  /**
   * Marks `ptr` as used on `stream` as well as on the stream it was allocated on, so that once freed its memory
   * is reused only after the work queued on `stream` so far has completed (PyTorch's `recordStream`). A member of
   * allocators for devices with several streams (the caching engine; CUDA); adaptors forward it. Default
   * (absent): the device orders all work on one stream or queue (CPU, WebGPU), so there is nothing to record;
   * callers write `allocator.recordStream?.(ptr, stream)`.
   * @throws UseAfterReleaseError when `ptr` was released
   * @throws ForeignPointerError when this allocator (or its upstream) did not allocate `ptr`
   * @throws InvalidArgumentError for a stream the device does not have
   */
  recordStream?(ptr: DataPtr, stream: number): void;

  /**
   * Copies `nbytes` from `src[srcOffset…]` to `dst[dstOffset…]`, both allocated by this allocator's device. The
   * ranges may be in one allocation only if they do not overlap.
   * @throws InvalidArgumentError when a range runs past its pointer or the counts are not byte counts
   * @throws DeviceMismatchError when either pointer lives on another device
   * @throws UseAfterReleaseError when either pointer was released
   */
  copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset?: number, srcOffset?: number): void;

  /** Copies host bytes into `dst` at `dstOffset`. Same errors as `copyData`. */
  writeBytes(dst: DataPtr, bytes: Uint8Array, dstOffset?: number): void;

  /** Resolves to a host copy of `byteLength` bytes of `src` from `srcOffset` (default: the whole pointer). */
  readBytes(src: DataPtr, srcOffset?: number, byteLength?: number): Promise<Uint8Array>;

  /** Statistics under PyTorch's key names; see {@link AllocatorStats}. */
  memoryStats(): AllocatorStats;

  /** Sets every `peak` to its `current`. */
  resetPeakStats(): void;

  /** Segments and blocks in PyTorch's snapshot schema. */
  snapshot(): MemorySnapshot;

  /** Returns cached, unallocated memory to the device. Live allocations are untouched. */
  emptyCache(): void;

  /**
   * True when freeing `ptr` is this allocator's business: its deleter is this allocator's (or an adaptor's in
   * this stack). COW and IPC take over only pointers their storage's allocator owns. Default (absent): false.
   */
  owns?(ptr: DataPtr): boolean;

  /**
   * The LMS hook: a fresh LMS object for a storage this allocator backs, or null when LMS is off for it.
   * Default (absent): null. Called once per StorageImpl, at its construction.
   */
  asLmsStorage?(storage: StorageImpl): LmsStorage | null;

  /** Frees everything this allocator holds. Idempotent. */
  dispose(): void;
}

/** The runtime's host (cpu:0) allocator. */
export const Allocator: Token<Allocator> = Symbol('stowage.Allocator');
