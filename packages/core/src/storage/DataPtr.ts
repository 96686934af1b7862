import type { Device } from '../contracts/Device.js';
import { formatDevice } from '../contracts/Device.js';
import { DoubleFreeError } from '../errors/DoubleFreeError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';

/** Frees what a DataPtr points at, given the pointer's context. Called at most once per pointer. */
export type Deleter = (context: unknown) => void;

/** The parts of an allocation a DataPtr records. */
export interface DataPtrInit<H> {
  readonly device: Device;
  /** Usable bytes; what the caller asked for, not what the allocator rounded to. */
  readonly byteLength: number;
  /** Backend handle: ArrayBuffer/SharedArrayBuffer (cpu), `bigint` device address (cuda), GPUBuffer (webgpu). */
  readonly handle: H;
  /** Offset of byte 0 inside `handle` (a sub-allocation of a larger buffer); 0 when the handle is the block. */
  readonly byteOffset: number;
  /** Address of byte 0 in the device's (possibly virtual) address space; used for snapshots and alignment. */
  readonly address: number;
  readonly context: unknown;
  readonly deleter: Deleter | null;
}

/**
 * Note [A DataPtr that never dies]: V8 compiles the allocation and free paths against the hidden classes
 * ("maps") a DataPtr passes through as its constructor adds fields, and holds those maps weakly. When no DataPtr
 * is alive at a garbage collection (a program between steps that frees everything, and any bench between
 * passes), the maps are collected and every compiled function that inlined the constructor or a field read is
 * thrown away and compiled again on the next step: measured with `--trace-deopt` on the WebGPU bench, five
 * functions per collection, on V8's compiler threads while the next step runs. One pointer made when the class is
 * defined (a static field, which bundlers keep with the class, unlike an unused export) and held by the class
 * keeps the maps alive. It owns nothing and is never released.
 */
/**
 * One allocation as a storage sees it, after c10's DataPtr: where the bytes are, plus an opaque context and a
 * deleter that frees them. COW and IPC take ownership of an allocation by swapping the context and deleter in
 * place ({@link DataPtr.compareExchangeDeleter}).
 *
 * Invariants: `release()` calls the deleter exactly once; `isReleased` is true from then on.
 */
export class DataPtr<H = unknown> implements Disposable {
  readonly device: Device;
  readonly byteLength: number;
  readonly handle: H;
  readonly byteOffset: number;
  readonly address: number;
  #context: unknown;
  #deleter: Deleter | null;
  #released = false;
  #holder: object | null = null;

  constructor(init: DataPtrInit<H>) {
    this.device = init.device;
    this.byteLength = init.byteLength;
    this.handle = init.handle;
    this.byteOffset = init.byteOffset;
    this.address = init.address;
    this.#context = init.context;
    this.#deleter = init.deleter;
  }

  /** The owner's bookkeeping for this allocation (a block, a COW context, IPC sent data). */
  get context(): unknown {
    return this.#context;
  }

  get deleter(): Deleter | null {
    return this.#deleter;
  }

  get isReleased(): boolean {
    return this.#released;
  }

  /**
   * The live storage that holds this pointer, or null. Note [One holder per pointer]: a StorageImpl holds its
   * DataPtr from construction (or `setDataPtr`) until it lets it go (`setDataPtr`, `resize`, `release`); while
   * held, no second storage may take it (`rt.adopt(p)` twice, `new StorageImpl`, `sibling`) and
   * `allocator.free(ptr)` and `ptr.release()` refuse it, so that no storage ever reports memory live that was freed
   * under it (whatever the allocator's own `free` does: an adaptor's, a device's for imported buffers). Owners that
   * swap pointers (COW materialization, LMS page-in) take the old one back with `setDataPtr` before releasing it.
   */
  get holder(): object | null {
    return this.#holder;
  }

  /**
   * Makes `holder` this pointer's holder (Note [One holder per pointer]); for StorageImpl.
   * @throws InvalidArgumentError when another holder holds it; UseAfterReleaseError when it was released
   */
  hold(holder: object): void {
    if (this.#released) {
      throw new UseAfterReleaseError(`The ${this.byteLength}-byte allocation at address 0x${this.address.toString(16)} on ${formatDevice(this.device)} was already released; no storage can hold it.`);
    }
    if (this.#holder !== null && this.#holder !== holder) {
      throw new InvalidArgumentError('dataPtr', this, 'a pointer no live storage holds (one storage owns a pointer; release that storage, or copy its bytes)');
    }
    this.#holder = holder;
  }

  /** Ends `holder`'s hold, if it holds this pointer. */
  letGo(holder: object): void {
    if (this.#holder === holder) this.#holder = null;
  }

  /**
   * Replaces deleter and context if the current deleter is `expected`; returns whether it did. Used to take
   * ownership (a COW context wraps the original context) without racing another owner.
   */
  compareExchangeDeleter(expected: Deleter | null, deleter: Deleter | null, context: unknown): boolean {
    if (this.#deleter !== expected || this.#released) return false;
    this.#deleter = deleter;
    this.#context = context;
    return true;
  }

  /**
   * Frees the allocation through the deleter.
   * @throws DoubleFreeError when already released; nothing is freed twice. InvalidArgumentError while a live
   * storage holds the pointer (Note [One holder per pointer]); nothing changes.
   */
  release(): void {
    if (this.#released) {
      throw new DoubleFreeError(
        `The ${this.byteLength}-byte allocation at address 0x${this.address.toString(16)} on ${formatDevice(this.device)} was already released.`,
      );
    }
    if (this.#holder !== null) {
      throw new InvalidArgumentError(
        'ptr',
        this,
        `a pointer no live storage holds: the ${this.byteLength}-byte allocation at 0x${this.address.toString(16)} belongs to a live storage; release the storage instead`,
      );
    }
    this.#released = true;
    const deleter = this.#deleter;
    this.#deleter = null;
    deleter?.(this.#context);
  }

  /** Releases unless already released; safe at the end of a `using` scope. */
  [Symbol.dispose](): void {
    if (!this.#released) this.release();
  }

  /** Note [A DataPtr that never dies]. */
  private static readonly shapeKeeper: DataPtr<null> = new DataPtr<null>({
    device: Object.freeze({ type: 'cpu', index: 0 }),
    byteLength: 0,
    handle: null,
    byteOffset: 0,
    address: 0,
    context: null,
    deleter: null,
  });
}
