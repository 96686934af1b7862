import type { AllocateOptions } from './Allocator.js';
import type { Device } from './Device.js';
import type { MemoryBlock } from './MemoryBlock.js';
import type { Pager } from './Pager.js';
import type { Token } from './Token.js';

/** A stream (CUDA) or queue (WebGPU) ordinal; backends with one queue have only stream 0. */
export type StreamId = number;

/** A marker recorded on a stream; complete once the stream's work before it has finished. */
export interface BackendEvent {
  readonly stream: StreamId;
}

/** Per-segment options a backend may honour. */
export interface SegmentOptions {
  readonly stream?: StreamId;
  /** The segment kind, as `segmentKind` named it for the request. */
  readonly kind?: number;
}

/**
 * The driver service-provider interface under the caching engine: whole segments of device memory, copies,
 * host transfers, streams and events. CPU, WebGPU, CUDA and third parties implement it once; the engine (and
 * `makeAllocator`) supply everything above it.
 *
 * Handles are whatever the device uses (ArrayBuffer, GPUBuffer, a bigint address); offsets are bytes from the
 * handle's start. A backend never validates ranges: its callers already have.
 */
export interface MemoryBackend<H = unknown> {
  readonly device: Device;
  /** Every segment's address is a multiple of this power of two. */
  readonly alignment: number;
  /**
   * Bytes the device (the hardware) can hold, or undefined when the device cannot say (then only `malloc` failing
   * tells). Never an allocator's budget: that is the engine's `memoryLimit` (a device plugin's `limit`).
   */
  readonly capacityBytes: number | undefined;
  readonly defaultStream: StreamId;
  /**
   * True when a freed block may still be read by work the caller recorded but has not submitted yet (WebGPU
   * command encoders): the engine then returns every freed block to its pool only after an event recorded on
   * the block's own stream at free time completes. Default false.
   */
  readonly deferredFree?: boolean;

  /**
   * The kind of segment a request needs, for backends whose segments are not interchangeable (cpu: shared or
   * not; webgpu: buffer usage). Blocks of one kind never serve a request of another. Default: 0 for all.
   */
  segmentKind?(options: AllocateOptions): number;

  /** Reserves a segment of exactly `byteLength` bytes; null when the device has no room (not a throw). */
  malloc(byteLength: number, options?: SegmentOptions): MemoryBlock<H> | null;
  /** Returns a segment from `malloc` to the device. Called once per segment. */
  free(segment: MemoryBlock<H>): void;

  copy(dst: H, dstOffset: number, src: H, srcOffset: number, byteLength: number): void;
  write(dst: H, dstOffset: number, bytes: Uint8Array): void;
  read(src: H, srcOffset: number, byteLength: number): Promise<Uint8Array>;

  /** True when `stream` names a stream of this device. */
  isStream(stream: StreamId): boolean;
  /** Records an event after the work queued on `stream` so far. */
  recordEvent(stream: StreamId): BackendEvent;
  /** True once the work before `event` has completed. */
  isEventComplete(event: BackendEvent): boolean;
  /** Blocks until the work before `event` has completed (cudaEventSynchronize); used by `emptyCache`. */
  synchronizeEvent(event: BackendEvent): void;

  /**
   * Page mapping (CUDA virtual memory management, virtual backends): lets the caching engine grow one
   * expandable segment per stream instead of reserving many fixed ones. Absent when the backend can only
   * malloc whole segments.
   */
  readonly pageMapping?: PageMapping<H> | undefined;

  /** Moves blocks of this backend to host memory and back, for LMS; absent when the device cannot page. */
  readonly pager?: Pager | undefined;

  /**
   * A sentence for the OutOfMemoryError of a request the device can never serve whatever is free (over a
   * per-buffer limit, say); undefined when the request is within the device's limits.
   */
  outOfMemoryHint?(requestedBytes: number): string | undefined;

  /**
   * Free and total bytes of the device as its driver reports them, other processes' memory included (CUDA's
   * cuMemGetInfo); absent when the device cannot say. An OutOfMemoryError then gives the driver's free figure.
   */
  memoryInfo?(): { readonly freeBytes: number; readonly totalBytes: number };

  dispose?(): void;
}

export const MemoryBackend: Token<MemoryBackend> = Symbol('stowage.MemoryBackend');

/**
 * Reserve a virtual address range once, then map and unmap physical memory inside it. Each range has its page size,
 * chosen when it is reserved (a multiple of the mapping's granularity `pageBytes`): offsets and lengths in the range
 * are multiples of it, and each physical allocation covers one or more pages, mapped and unmapped whole. Only mapped
 * pages count against the device's capacity.
 */
export interface PageMapping<H = unknown> {
  /** Mapping granularity in bytes (2 MiB for CUDA): the smallest page a range may have. A power of two. */
  readonly pageBytes: number;
  /**
   * Reserves `byteLength` bytes of address space, none mapped, whose pages are `pageBytes` each (default the
   * granularity; a multiple of it, which the caller checked); null when no range is left.
   */
  reserve(byteLength: number, pageBytes?: number): MemoryBlock<H> | null;
  /**
   * Maps pages at `[offset, offset + byteLength)` of `range` as physical allocations of `allocationBytes` each (a
   * multiple of the range's page size dividing `byteLength`; default one page) and makes them accessible at once;
   * false (nothing mapped) when memory is short. An allocation is mapped and unmapped only whole.
   */
  map(range: MemoryBlock<H>, offset: number, byteLength: number, allocationBytes?: number): boolean;
  /** Unmaps whole allocations previously mapped, `[offset, offset + byteLength)`; their memory returns to the device. */
  unmap(range: MemoryBlock<H>, offset: number, byteLength: number): void;
  /** Returns an address range with no pages mapped. */
  release(range: MemoryBlock<H>): void;
}
