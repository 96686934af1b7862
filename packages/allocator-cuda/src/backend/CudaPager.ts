import type { CachingAllocator, Device, Pager } from '@stowage/core';
import type { PageOut, StreamId } from '@stowage/core/plugin-kit';
import { DataPtr, DeviceError, formatDevice, InvalidArgumentError } from '@stowage/core';
import { CudaCopyStream } from './CudaCopyStream.js';
import type { CudaMemoryBackend } from './CudaMemoryBackend.js';

class CudaPageOut implements PageOut {
  bytes: Uint8Array | null = null;
  readonly done: Promise<Uint8Array>;
  resolve!: (bytes: Uint8Array) => void;
  reject!: (error: Error) => void;

  constructor(readonly byteLength: number) {
    this.done = new Promise<Uint8Array>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.done.catch(() => {}); // a failure is the awaiting caller's to see, never an unhandled rejection
  }
}

/**
 * LMS paging for CUDA (Note [Paging in device order] in core's Pager), on a stream of its own so that copies overlap
 * the program's kernels:
 * - page-out: the pager stream waits for an event recorded on the block's stream (the program's writes to it come
 *   first), copies the block into pinned host memory (cuMemcpyDtoHAsync), and the engine records the pager stream on
 *   the block (`recordStream`), so the block is reused only after the copy has read it; the caller may free it at
 *   once. When the copy's event completes, the bytes move from the pinned buffer into an ordinary array
 *   (`PageOut.bytes`) and the buffer goes back to the pool.
 * - page-in: the bytes go into a pinned buffer, the pager stream waits for the destination block's stream, copies
 *   (cuMemcpyHtoDAsync), and the destination's stream then waits for the copy's event: work the program queues on it
 *   afterwards sees the bytes.
 * Nothing blocks the JavaScript thread: the pager stream is a non-blocking CudaCopyStream, whose completions are
 * learnt by one asynchronous cuEventSynchronize at a time on a koffi worker thread, oldest first.
 */
export class CudaPager implements Pager {
  readonly #backend: CudaMemoryBackend;
  readonly #engine: CachingAllocator<bigint>;
  readonly #copies: CudaCopyStream;

  constructor(backend: CudaMemoryBackend, engine: CachingAllocator<bigint>) {
    this.#backend = backend;
    this.#engine = engine;
    this.#copies = new CudaCopyStream(backend, { nonBlocking: true });
  }

  get device(): Device {
    return this.#backend.device;
  }

  /** Pinned host bytes the pager holds for its copies. */
  get pinnedBytes(): number {
    return this.#copies.pinnedBytes;
  }

  /**
   * Pager#pageOut on the pager's copy stream.
   * @throws (the engine's recordStream, before anything is enqueued) InvalidArgumentError for something that is not a
   * DataPtr, ForeignPointerError for a pointer of another allocator, UseAfterReleaseError for a released one
   */
  pageOut(src: DataPtr): PageOut {
    this.#backend.enter(); // events and staging belong to this device's context
    const copies = this.#copies;
    const side = copies.stream;
    // First, as it checks the pointer: once the copy is queued, its staging buffer must not go back to the pool
    // before the copy has run.
    this.#engine.recordStream(src, side);
    const out = new CudaPageOut(src.byteLength);
    const staging = copies.take(src.byteLength);
    try {
      copies.waitFor(this.#streamOf(src));
      this.#backend.driver.memcpyDtoHAsync(staging.address, (src.handle as bigint) + BigInt(src.byteOffset), src.byteLength, this.#backend.streams.handle(side));
    } catch (error) {
      copies.give(staging);
      throw error;
    }
    copies.queue(staging, (error) => {
      if (error !== undefined) return out.reject(error);
      out.bytes = staging.bytes.slice(0, src.byteLength);
      out.resolve(out.bytes);
    });
    return out;
  }

  /**
   * Pager#pageIn on the pager's copy stream.
   * @throws InvalidArgumentError for bytes that are not a Uint8Array, or a dst that is not a live pointer of this
   * allocator with room for them, before anything is enqueued
   */
  pageIn(bytes: Uint8Array, dst: DataPtr): void {
    if (!(bytes instanceof Uint8Array)) throw new InvalidArgumentError('bytes', bytes, 'a Uint8Array: the bytes a pageOut copied to the host');
    if (!(dst instanceof DataPtr) || dst.isReleased || dst.byteLength < bytes.byteLength || this.#engine.describeBlock(dst) === undefined) {
      throw new InvalidArgumentError('dst', dst, `a live DataPtr of this ${formatDevice(this.device)} allocator with at least ${bytes.byteLength} bytes`);
    }
    this.#backend.enter();
    const copies = this.#copies;
    const staging = copies.take(bytes.byteLength);
    staging.bytes.set(bytes);
    const side = copies.stream;
    const driver = this.#backend.driver;
    const dstStream = this.#streamOf(dst);
    try {
      copies.waitFor(dstStream);
      driver.memcpyHtoDAsync((dst.handle as bigint) + BigInt(dst.byteOffset), staging.address, bytes.byteLength, this.#backend.streams.handle(side));
    } catch (error) {
      copies.give(staging);
      throw error;
    }
    const event = copies.queue(staging, () => {});
    driver.streamWaitEvent(this.#backend.streams.handle(dstStream), event);
  }

  /** Waits for every copy in flight (failing its page-out), then returns the pinned buffers and events to the driver. */
  dispose(): void {
    this.#copies.dispose(new DeviceError('The CUDA allocator was disposed while a page transfer was in flight.'));
  }

  #streamOf(ptr: DataPtr): StreamId {
    return this.#engine.describeBlock(ptr)?.stream ?? this.#backend.defaultStream;
  }
}
