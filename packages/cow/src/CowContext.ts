import type { StorageImpl } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';
import { BeforeWrite, UNDERLYING } from '@stowage/core/plugin-kit';
import type { UnderlyingContext, WriteGuard } from '@stowage/core/plugin-kit';
import type { SharedCowPins } from './SharedCowPins.js';

/** Word indices of a context's state. */
const REFCOUNT = 0;
const LOCK = 1;
/** Lock word value while a materialization steals the data. */
const EXCLUSIVE = -1;

/**
 * The shared state of a set of lazy copies: one data allocation, how to free it, a reference count and a
 * shared/exclusive lock (Note [COW locking]).
 *
 * Note [COW locking]: a lazy clone is a read and a materialization a write, so within one storage they never
 * race; across storages sharing a context they may (other workers). A clone only bumps the count: the
 * context cannot vanish under it since its caller holds a reference. A materialization with other references
 * left copies the data under the shared lock, then drops its reference; the last reference takes the
 * exclusive lock, which waits for copies in flight, and keeps the data without copying. The count and the lock
 * live in an Int32Array over a SharedArrayBuffer when the data itself is shared memory, so workers holding
 * storages of one context use the same words through Atomics.
 *
 * Invariants: refcount == number of live COW DataPtrs over the data, plus descriptors shared but not yet
 * received, plus one while this thread holds a sharing pin; the original deleter runs exactly once, when
 * refcount reaches 0 without a steal (through the pin's release when there is one).
 */
export class CowContext implements WriteGuard, UnderlyingContext {
  /** [refcount, lock]: lock > 0 is the number of copies in flight, EXCLUSIVE a steal, 0 free. */
  readonly state: Int32Array;
  readonly originalDeleter: Deleter | null;
  readonly originalContext: unknown;
  readonly #materialize: (storage: StorageImpl) => void;
  /** The state lives in a SharedArrayBuffer: other threads may hold the lock, so waits and wake-ups are real. */
  readonly #shared: boolean;
  /** Bytes of the data while this thread holds a sharing pin on it (Note [COW across threads]); 0 without one. */
  #pinnedBytes = 0;
  /** The runtime's set this context is in while pinned: its `collect` frees the data once receivers are done. */
  #pins: SharedCowPins | null = null;

  /**
   * A context with one reference, or (with `state`) a handle on the state another thread made: then the
   * original deleter is that thread's business and should be null here.
   */
  constructor(init: {
    shared: boolean;
    originalDeleter: Deleter | null;
    originalContext: unknown;
    materialize: (storage: StorageImpl) => void;
    state?: Int32Array;
  }) {
    if (init.state) this.state = init.state;
    else {
      this.state = new Int32Array(init.shared ? new SharedArrayBuffer(8) : new ArrayBuffer(8));
      Atomics.store(this.state, REFCOUNT, 1);
    }
    this.#shared = typeof SharedArrayBuffer !== 'undefined' && this.state.buffer instanceof SharedArrayBuffer;
    this.originalDeleter = init.originalDeleter;
    this.originalContext = init.originalContext;
    this.#materialize = init.materialize;
  }

  /**
   * The allocator's deleter and context under this one while one pointer alone references the data (no clone, no
   * sharing pin, no copy or steal in flight): its block is then that storage's again, and its allocator's services
   * may describe and move it (Note [Sole references] in core's allocatorDeleters.ts). Null otherwise.
   */
  [UNDERLYING](): { readonly deleter: Deleter | null; readonly context: unknown } | null {
    if (this.originalDeleter === null || Atomics.load(this.state, REFCOUNT) !== 1 || this.#pinnedBytes > 0 || Atomics.load(this.state, LOCK) !== 0) return null;
    return { deleter: this.originalDeleter, context: this.originalContext };
  }

  /** References on the data, a sharing pin included. */
  get refcount(): number {
    return Atomics.load(this.state, REFCOUNT);
  }

  /** References held by storages (here or in other threads) and descriptors not yet received: the pin left out. */
  get references(): number {
    return this.refcount - (this.#pinnedBytes > 0 ? 1 : 0);
  }

  /** True when the caller's reference is the only one: the data may be kept without copying (a steal). */
  get isSoleReference(): boolean {
    return this.references === 1;
  }

  /**
   * Takes, once, the sharing pin of data this thread owns and hands to other threads (Note [COW across
   * threads]): one extra reference that only this thread drops, so the data outlives every receiver even when
   * this thread's storages go first, and is freed here once the receivers are done. `pins` is the runtime's
   * set (SharedCowPins) that collects it.
   */
  pinForSharing(byteLength: number, pins: SharedCowPins): void {
    if (this.#pinnedBytes > 0) return;
    if (this.originalDeleter === null) throw new Error('CowContext: only the owner of the data can pin it');
    this.incref();
    this.#pinnedBytes = Math.max(byteLength, 1);
    this.#pins = pins;
    pins.contexts.add(this);
  }

  /**
   * Frees the data if the sharing pin is the last reference (every receiver and storage is done); returns the
   * bytes freed, 0 when it is not pinned or still referenced.
   */
  releasePinIfLast(): number {
    const bytes = this.#pinnedBytes;
    if (bytes === 0 || Atomics.compareExchange(this.state, REFCOUNT, 1, 0) !== 1) return 0;
    this.#unpin();
    this.originalDeleter?.(this.originalContext);
    return bytes;
  }

  incref(): void {
    Atomics.add(this.state, REFCOUNT, 1);
  }

  /** Drops one reference; returns the count left. */
  decref(): number {
    return Atomics.sub(this.state, REFCOUNT, 1) - 1;
  }

  /**
   * Marks the data as taken by a steal: no reference is left (a sharing pin with it, since every receiver is
   * done) and the original deleter moved with the data.
   */
  release(): void {
    Atomics.store(this.state, REFCOUNT, 0);
    this.#unpin();
  }

  #unpin(): void {
    if (this.#pinnedBytes === 0) return;
    this.#pinnedBytes = 0;
    this.#pins?.contexts.delete(this);
    this.#pins = null;
  }

  lockShared(): void {
    for (;;) {
      const value = Atomics.load(this.state, LOCK);
      if (value >= 0 && Atomics.compareExchange(this.state, LOCK, value, value + 1) === value) return;
      this.#wait(value);
    }
  }

  unlockShared(): void {
    if (Atomics.sub(this.state, LOCK, 1) === 1) this.#notify();
  }

  lockExclusive(): void {
    for (;;) {
      const value = Atomics.compareExchange(this.state, LOCK, 0, EXCLUSIVE);
      if (value === 0) return;
      this.#wait(value);
    }
  }

  unlockExclusive(): void {
    Atomics.store(this.state, LOCK, 0);
    this.#notify();
  }

  /** StorageImpl#mutableData calls this for a storage over this context: the write materializes first. */
  [BeforeWrite](storage: StorageImpl): void {
    this.#materialize(storage);
  }

  #wait(seen: number): void {
    if (!this.#shared) return; // one thread: nothing else can hold the lock
    try {
      Atomics.wait(this.state, LOCK, seen, 1);
    } catch {
      // Atomics.wait is not allowed on a browser's main thread: spin instead.
    }
  }

  #notify(): void {
    if (this.#shared) Atomics.notify(this.state, LOCK);
  }
}
