import type { StreamId } from '@stowage/core/plugin-kit';
import type { CudaDriver, CudaEvent, PinnedHostMemory } from '../driver/CudaDriver.js';
import { CudaError } from '../driver/CudaError.js';
import type { CudaMemoryBackend } from './CudaMemoryBackend.js';
import { PinnedPool } from './PinnedPool.js';

/** A copy queued on the stream, and what to do once its event completes. */
interface Transfer {
  readonly event: CudaEvent;
  readonly staging: PinnedHostMemory;
  readonly done: (error?: Error) => void;
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

export interface CudaCopyStreamOptions {
  /** The stream does not synchronize with the legacy default stream (CU_STREAM_NON_BLOCKING). */
  readonly nonBlocking: boolean;
}

/**
 * One stream of a device for copies between device memory and pooled pinned host memory, whose completions are
 * learnt without blocking the JavaScript thread (the pager's copies, the backend's reads):
 * - the caller takes a pinned buffer (`take`), orders the stream after other streams if it must (`waitFor`),
 *   queues its cuMemcpy*Async on `stream`, then `queue`s the buffer with a callback;
 * - `queue` records an event after the copy; one asynchronous cuEventSynchronize at a time, on a koffi worker
 *   thread, waits for the oldest event (the stream completes in order), then every copy done by then completes:
 *   its callback runs and its buffer goes back to the pool.
 * The stream is created on first use, in the device's context, and destroyed with the backend's streams.
 *
 * Invariants: `pending` holds the transfers in the order they were queued; at most one asynchronous wait is in
 * flight (`waitingOn`), and its event is `pending[0]`'s or one `synchronize`/`dispose` left to it; a pinned buffer is
 * either handed out (queued or held by a caller) or in the pool.
 */
export class CudaCopyStream {
  readonly #backend: CudaMemoryBackend;
  readonly #nonBlocking: boolean;
  readonly #pinned: PinnedPool;
  readonly #pending: Transfer[] = [];
  /** Events for `waitFor`, reusable as soon as the wait is queued. */
  readonly #eventPool: CudaEvent[] = [];
  #stream: StreamId | null = null;
  /** The event the asynchronous wait in flight is on (the oldest copy's when it began); null when none runs. */
  #waitingOn: CudaEvent | null = null;
  #disposed = false;

  constructor(backend: CudaMemoryBackend, options: CudaCopyStreamOptions) {
    this.#backend = backend;
    this.#nonBlocking = options.nonBlocking;
    this.#pinned = new PinnedPool(backend.driver, () => backend.enter());
  }

  /** Pinned host bytes held for copies. */
  get pinnedBytes(): number {
    return this.#pinned.reservedBytes;
  }

  /** Copies queued and not yet completed. */
  get pendingCount(): number {
    return this.#pending.length;
  }

  /** The stream's number in the backend's table, created on first use (the caller made the device's context current). */
  get stream(): StreamId {
    if (this.#stream === null) this.#stream = this.#backend.streams.create(this.#backend.device.index, this.#nonBlocking);
    return this.#stream;
  }

  /** A pinned buffer of at least `byteLength` bytes; back to the pool through `give`, or through `queue` once its copy completes. */
  take(byteLength: number): PinnedHostMemory {
    return this.#pinned.take(byteLength);
  }

  /** Returns a buffer from `take` whose copy was never queued. */
  give(staging: PinnedHostMemory): void {
    this.#pinned.give(staging);
  }

  /** The stream's next copy waits for the work queued on `stream` so far. */
  waitFor(stream: StreamId): void {
    const driver = this.#backend.driver;
    const streams = this.#backend.streams;
    const event = this.#eventPool.pop() ?? driver.eventCreate(EVENT_DISABLE_TIMING);
    try {
      driver.eventRecord(event, streams.handle(stream));
      driver.streamWaitEvent(streams.handle(this.stream), event);
    } finally {
      this.#eventPool.push(event); // reusable at once: a wait uses the record made before it
    }
  }

  /**
   * Records an event after the copy just queued on `stream`, and calls `done` once it completes (then `staging`
   * goes back to the pool), or with the error should waiting fail. Returns the event (for a stream to wait on; it is
   * destroyed once complete).
   */
  queue(staging: PinnedHostMemory, done: (error?: Error) => void): CudaEvent {
    const driver = this.#backend.driver;
    const event = driver.eventCreate(EVENT_DISABLE_TIMING);
    try {
      driver.eventRecord(event, this.#backend.streams.handle(this.stream));
    } catch (error) {
      driver.eventDestroy(event);
      throw error;
    }
    this.#pending.push({ event, staging, done });
    this.#wake();
    return event;
  }

  /** Blocks until every copy queued so far has completed, and completes each (callbacks run, buffers go back). */
  synchronize(): void {
    this.#drain();
  }

  /**
   * Waits (blocking) for every copy in flight, completes each with `error` (or normally, without one), and
   * returns the pinned buffers and events to the driver. Idempotent.
   */
  dispose(error?: Error): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#backend.enter();
    this.#drain(error);
    for (const e of this.#eventPool.splice(0)) this.#backend.driver.eventDestroy(e);
    this.#pinned.dispose();
  }

  /** Completes every queued copy in order, blocking on each event. */
  #drain(error?: Error): void {
    const driver = this.#backend.driver;
    while (this.#pending.length > 0) {
      const t = this.#pending[0]!;
      driver.eventSynchronize(t.event); // first: should it throw, the copy is still queued
      this.#pending.shift();
      // Note [The awaited event]: the asynchronous wait in flight still uses its event; it destroys it on return.
      if (t.event !== this.#waitingOn) driver.eventDestroy(t.event);
      t.done(error);
      this.#pinned.give(t.staging);
    }
  }

  /** Waits (off the JavaScript thread) for the oldest copy in flight, then completes every copy done by then. */
  #wake(): void {
    if (this.#waitingOn !== null || this.#pending.length === 0 || this.#disposed) return;
    const event = this.#pending[0]!.event;
    this.#waitingOn = event;
    synchronizeAsync(this.#backend.driver, event).then(
      () => this.#waited(event),
      (error: Error) => this.#waited(event, error),
    );
  }

  #waited(event: CudaEvent, error?: Error): void {
    this.#waitingOn = null;
    if (this.#pending[0]?.event !== event) {
      // Note [The awaited event]: synchronize or dispose completed this copy meanwhile and left its event here.
      this.#destroyQuietly(event);
    }
    if (this.#disposed) return;
    if (error === undefined) this.#complete();
    else this.#fail(error);
  }

  #complete(): void {
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
    for (const t of this.#pending.splice(0)) {
      this.#destroyQuietly(t.event);
      t.done(error);
    }
  }

  /** Destroys an event off the main path (a failed wait, a wait that returned after dispose), where no one could catch. */
  #destroyQuietly(event: CudaEvent): void {
    try {
      this.#backend.driver.eventDestroy(event);
    } catch {
      // the event is gone with its context (disposed) or the driver failed it already: nothing is left to free
    }
  }
}

// Note [The awaited event]
// One cuEventSynchronize runs on a koffi worker thread at a time, on the oldest copy's event. When `synchronize` or
// `dispose` completes that copy on the JavaScript thread first, destroying its event there would pull it from under
// the call still using it (the driver gives no guarantee for that). So the event is left to the wait's callback,
// which destroys it when the call has returned: shortly after, since the event has completed by then.
