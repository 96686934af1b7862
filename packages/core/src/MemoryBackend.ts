import type { Device } from './Device.js';
import type { MemoryBlock } from './MemoryBlock.js';
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
  /** cpu: SharedArrayBuffer-backed segment. */
  readonly shared?: boolean;
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
  /** Bytes the device can hold, or undefined when the device cannot say (then only `malloc` failing tells). */
  readonly capacityBytes: number | undefined;
  readonly defaultStream: StreamId;

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

  dispose?(): void;
}

export const MemoryBackend: Token<MemoryBackend> = Symbol('stowage.MemoryBackend');
