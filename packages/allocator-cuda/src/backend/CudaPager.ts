import type { CachingAllocator, DataPtr, Device, PageOut, Pager, StreamId } from '@stowage/core';
import { DeviceError } from '@stowage/core';
import type { CudaDriver, CudaEvent, PinnedHostMemory } from '../driver/CudaDriver.js';
import { CudaError } from '../driver/CudaError.js';
import type { CudaMemoryBackend } from './CudaMemoryBackend.js';
import { PinnedPool } from './PinnedPool.js';

/** A copy queued on the pager's stream, and what to do once its event completes. */
interface Transfer {
  readonly event: CudaEvent;
  readonly staging: PinnedHostMemory;
  readonly done: (error?: Error) => void;
}

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

/** cuEventSynchronize on one of koffi's worker threads: resolves when the event completes, without blocking this one. */
function synchronizeAsync(driver: CudaDriver, event: CudaEvent): Promise<void> {
  const call = driver.raw('cuEventSynchronize') as unknown as { async(handle: unknown, callback: (error: unknown, result: number) => void): void };
  return new Promise((resolve, reject) => {
    call.async(event.handle, (error, result) => {
      if (error) return reject(error instanceof Error ? error : new Error(String(error)));
      if (result === 0) return resolve();
      reject(new CudaError({ call: 'cuEventSynchronize', result, driverName: driver.errorName(result), driverMessage: driver.errorString(result) }));
    });
  });
}

/** cuEventCreate's CU_EVENT_DISABLE_TIMING. */
const EVENT_DISABLE_TIMING = 2;

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
 * Nothing blocks the JavaScript thread: completions are learnt by one asynchronous cuEventSynchronize at a time on
 * a koffi worker thread, oldest first (the pager stream completes in order).
 */
export class CudaPager implements Pager {
  readonly #backend: CudaMemoryBackend;
  readonly #engine: CachingAllocator<bigint>;
  readonly #pinned: PinnedPool;
  readonly #pending: Transfer[] = [];
  readonly #eventPool: CudaEvent[] = [];
  #stream: StreamId | null = null;
  #waiting = false;
  #disposed = false;

  constructor(backend: CudaMemoryBackend, engine: CachingAllocator<bigint>) {
    this.#backend = backend;
    this.#engine = engine;
    this.#pinned = new PinnedPool(backend.driver, () => backend.enter());
  }

  get device(): Device {
    return this.#backend.device;
  }

  /** Pinned host bytes the pager holds for its copies. */
  get pinnedBytes(): number {
    return this.#pinned.reservedBytes;
  }

  pageOut(src: DataPtr): PageOut {
    const out = new CudaPageOut(src.byteLength);
    this.#backend.enter(); // events and staging belong to this device's context
    const side = this.#sideStream();
    // First, as it checks the pointer: once the copy is queued, its staging buffer must not go back to the pool
    // before the copy has run.
    this.#engine.recordStream(src, side);
    const staging = this.#pinned.take(src.byteLength);
    const driver = this.#backend.driver;
    try {
      this.#waitFor(this.#streamOf(src));
      driver.memcpyDtoHAsync(staging.address, (src.handle as bigint) + BigInt(src.byteOffset), src.byteLength, this.#backend.streams.handle(side));
    } catch (error) {
      this.#pinned.give(staging);
      throw error;
    }
    this.#queue(staging, (error) => {
      if (error !== undefined) return out.reject(error);
      out.bytes = staging.bytes.slice(0, src.byteLength);
      out.resolve(out.bytes);
    });
    return out;
  }

  pageIn(bytes: Uint8Array, dst: DataPtr): void {
    this.#backend.enter();
    const staging = this.#pinned.take(bytes.byteLength);
    staging.bytes.set(bytes);
    const side = this.#sideStream();
    const driver = this.#backend.driver;
    const dstStream = this.#streamOf(dst);
    try {
      this.#waitFor(dstStream);
      driver.memcpyHtoDAsync((dst.handle as bigint) + BigInt(dst.byteOffset), staging.address, bytes.byteLength, this.#backend.streams.handle(side));
    } catch (error) {
      this.#pinned.give(staging);
      throw error;
    }
    const event = this.#queue(staging, () => {});
    driver.streamWaitEvent(this.#backend.streams.handle(dstStream), event);
  }

  /** Waits for every copy in flight, then returns the pinned buffers and the pager's stream to the driver. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const driver = this.#backend.driver;
    this.#backend.enter();
    for (const t of this.#pending.splice(0)) {
      driver.eventSynchronize(t.event);
      driver.eventDestroy(t.event);
      t.done(new DeviceError('The CUDA allocator was disposed while a page transfer was in flight.'));
    }
    for (const e of this.#eventPool.splice(0)) driver.eventDestroy(e);
    this.#pinned.dispose();
  }

  #sideStream(): StreamId {
    if (this.#stream === null) {
      this.#stream = this.#backend.streams.create(this.#backend.device.index, true);
    }
    return this.#stream;
  }

  #streamOf(ptr: DataPtr): StreamId {
    return this.#engine.describeBlock(ptr)?.stream ?? this.#backend.defaultStream;
  }

  /** The pager stream's next copy waits for the work queued on `stream` so far. */
  #waitFor(stream: StreamId): void {
    const driver = this.#backend.driver;
    const event = this.#eventPool.pop() ?? driver.eventCreate(EVENT_DISABLE_TIMING);
    driver.eventRecord(event, this.#backend.streams.handle(stream));
    driver.streamWaitEvent(this.#backend.streams.handle(this.#stream!), event);
    this.#eventPool.push(event); // reusable at once: a wait uses the record made before it
  }

  /** Records an event after the copy just queued and completes `done` when it completes. */
  #queue(staging: PinnedHostMemory, done: (error?: Error) => void): CudaEvent {
    const driver = this.#backend.driver;
    const event = driver.eventCreate(EVENT_DISABLE_TIMING);
    driver.eventRecord(event, this.#backend.streams.handle(this.#stream!));
    this.#pending.push({ event, staging, done });
    this.#wake();
    return event;
  }

  /** Waits (off the JavaScript thread) for the oldest copy in flight, then completes every copy done by then. */
  #wake(): void {
    if (this.#waiting || this.#pending.length === 0 || this.#disposed) return;
    this.#waiting = true;
    const oldest = this.#pending[0]!;
    synchronizeAsync(this.#backend.driver, oldest.event).then(
      () => this.#complete(),
      (error: Error) => this.#fail(error),
    );
  }

  #complete(): void {
    this.#waiting = false;
    if (this.#disposed) return;
    const driver = this.#backend.driver;
    while (this.#pending.length > 0 && driver.eventQuery(this.#pending[0]!.event)) {
      const t = this.#pending.shift()!;
      driver.eventDestroy(t.event);
      t.done();
      this.#pinned.give(t.staging);
    }
    this.#wake();
  }

  #fail(error: Error): void {
    this.#waiting = false;
    for (const t of this.#pending.splice(0)) t.done(error);
  }
}
