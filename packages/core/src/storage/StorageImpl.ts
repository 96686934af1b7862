import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import { DataPtr } from './DataPtr.js';
import type { Device } from '../contracts/Device.js';
import { formatDevice, isSameDevice } from '../contracts/Device.js';
import { DeviceMismatchError } from '../errors/DeviceMismatchError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import { checkBoolean, checkByteCount, checkOptions } from '../validation/validate.js';
import type { LmsStorage } from '../contracts/LmsStorage.js';
import type { StorageHooks } from '../contracts/StorageHooks.js';
import { BeforeWrite, isWriteGuard } from '../contracts/WriteGuard.js';

export interface StorageInit {
  readonly dataPtr: DataPtr;
  readonly allocator: Allocator;
  /** Whether `resize()` is allowed (default false). */
  readonly resizable?: boolean;
  readonly hooks?: readonly StorageHooks[];
  /** How the data was allocated (`shared`, `usage`…): a resize allocates the same way. */
  readonly allocateOptions?: AllocateOptions;
}

/**
 * The bytes behind one or more tensors, after c10's StorageImpl. Tensors alias if and only if they share a
 * StorageImpl. Reads go through `data()`, writes through `mutableData()`: that is where COW materializes and
 * where generation numbers move, so code that writes must never keep a pointer from `data()`.
 *
 * Invariants: byteLength == dataPtr.byteLength while live; the LMS object, when present, was created for this
 * storage by its allocator at construction.
 */
export class StorageImpl implements Disposable {
  readonly allocator: Allocator;
  readonly resizable: boolean;
  /** The allocator's LMS object for this storage, or null when LMS is off for it. */
  readonly lms: LmsStorage | null;
  readonly #hooks: readonly StorageHooks[];
  #dataPtr: DataPtr;
  readonly #allocateOptions: AllocateOptions | undefined;
  #released = false;

  /**
   * Takes the pointer: this storage holds it from now on (Note [One holder per pointer] in DataPtr.ts).
   * @throws InvalidArgumentError for a missing pointer or allocator, or a pointer another live storage holds;
   * UseAfterReleaseError for a released pointer; DeviceMismatchError for a pointer of another device
   */
  constructor(init: StorageInit) {
    const checked = checkOptions('init', init, ['dataPtr', 'allocator', 'resizable', 'hooks', 'allocateOptions']);
    if (!(checked.dataPtr instanceof DataPtr)) throw new InvalidArgumentError('init.dataPtr', checked.dataPtr, 'a DataPtr');
    const allocator = checked.allocator as Partial<Allocator> | null;
    if (typeof allocator !== 'object' || allocator === null || typeof allocator.device !== 'object' || allocator.device === null) {
      throw new InvalidArgumentError('init.allocator', allocator, 'an Allocator');
    }
    checkBoolean('init.resizable', checked.resizable);
    if (checked.hooks !== undefined && !Array.isArray(checked.hooks)) throw new InvalidArgumentError('init.hooks', checked.hooks, 'an array of StorageHooks');
    if (init.dataPtr.isReleased) throw new UseAfterReleaseError(`Cannot make a storage over a released ${init.dataPtr.byteLength}-byte pointer.`);
    if (init.dataPtr.holder !== null) {
      throw new InvalidArgumentError('dataPtr', init.dataPtr, 'a pointer no live storage holds (one storage owns a pointer; release that storage, or copy its bytes)');
    }
    if (!isSameDevice(init.dataPtr.device, init.allocator.device)) {
      throw new DeviceMismatchError(
        `A storage's DataPtr lives on ${formatDevice(init.dataPtr.device)} but its allocator serves ${formatDevice(init.allocator.device)}.`,
      );
    }
    this.allocator = init.allocator;
    this.resizable = init.resizable ?? false;
    this.#hooks = init.hooks ?? [];
    this.#dataPtr = init.dataPtr;
    this.#allocateOptions = init.allocateOptions;
    this.lms = init.allocator.asLmsStorage?.(this) ?? null;
    init.dataPtr.hold(this);
    let created = 0;
    try {
      for (const hook of this.#hooks) {
        hook.afterCreate?.(this);
        created++;
      }
    } catch (error) {
      // Never handed out: the hooks that saw it created see it go, its LMS object goes; the caller still owns
      // the DataPtr.
      for (const hook of this.#hooks.slice(0, created)) {
        try {
          hook.beforeRelease?.(this);
        } catch {
          // the first failure is the one to report
        }
      }
      this.#released = true;
      try {
        this.lms?.release();
      } catch {
        // the first failure is the one to report
      } finally {
        init.dataPtr.letGo(this); // the caller owns it again, whatever the LMS object did
      }
      throw error;
    }
  }

  /**
   * A new storage over `dataPtr` (same device and byte length) with this storage's allocator, hooks and
   * resizable flag: how COW makes a lazy clone.
   * @throws UseAfterReleaseError once released, or for a released pointer; DeviceMismatchError or
   * InvalidArgumentError for a pointer of another device or size, or one a live storage holds
   */
  sibling(dataPtr: DataPtr): StorageImpl {
    this.#checkLive('sibling');
    checkPointer('dataPtr', dataPtr);
    if (!isSameDevice(dataPtr.device, this.device)) {
      throw new DeviceMismatchError(`Cannot make a sibling on ${formatDevice(dataPtr.device)} of a storage on ${formatDevice(this.device)}.`);
    }
    if (dataPtr.byteLength !== this.byteLength) {
      throw new InvalidArgumentError('dataPtr.byteLength', dataPtr.byteLength, `the storage's ${this.byteLength} bytes`);
    }
    return new StorageImpl({ dataPtr, allocator: this.allocator, resizable: this.resizable, hooks: this.#hooks, allocateOptions: this.#allocateOptions });
  }

  get device(): Device {
    return this.#dataPtr.device;
  }

  get byteLength(): number {
    return this.#dataPtr.byteLength;
  }

  get isReleased(): boolean {
    return this.#released;
  }

  /** How the data was allocated (`usage`, `shared`): LMS allocates a page-in the same way. */
  get allocateOptions(): AllocateOptions | undefined {
    return this.#allocateOptions;
  }

  /**
   * The DataPtr for reading. Never write through it. Under LMS the storage is brought back first if it was
   * reclaimed; the pointer stays valid while the storage is pinned (Note [Access outside a pin] in @stowage/lms).
   * @throws UseAfterReleaseError once released; what the LMS object's `access` throws (a page-in still in flight)
   */
  data(): DataPtr {
    this.#checkLive('data');
    if (this.lms !== null) this.lms.access(false); // a reclaimed storage comes back first
    for (const hook of this.#hooks) hook.beforeRead?.(this);
    return this.#dataPtr;
  }

  /** The DataPtr for writing; COW storages materialize here. Same errors as `data()`. */
  mutableData(): DataPtr {
    this.#checkLive('mutableData');
    if (this.lms !== null) this.lms.access(true); // back first, and any host copy of the old bytes is stale now
    const context = this.#dataPtr.context;
    if (isWriteGuard(context)) context[BeforeWrite](this);
    for (const hook of this.#hooks) hook.beforeWrite?.(this);
    return this.#dataPtr;
  }

  /**
   * The current DataPtr without running hooks or bringing a reclaimed storage back: for owners (COW, IPC, LMS)
   * that manage it. The pointer of a reclaimed storage is released.
   */
  peekDataPtr(): DataPtr {
    this.#checkLive('peekDataPtr');
    return this.#dataPtr;
  }

  /**
   * Replaces the DataPtr (same device and byte length) and returns the previous one, which the caller now
   * owns. Used by COW materialization and LMS page-in.
   */
  setDataPtr(dataPtr: DataPtr): DataPtr {
    this.#checkLive('setDataPtr');
    if (dataPtr === this.#dataPtr) return dataPtr; // already this storage's: nothing changes
    checkPointer('dataPtr', dataPtr);
    if (!isSameDevice(dataPtr.device, this.device)) {
      throw new DeviceMismatchError(`Cannot set a DataPtr on ${formatDevice(dataPtr.device)} into a storage on ${formatDevice(this.device)}.`);
    }
    if (dataPtr.byteLength !== this.byteLength) {
      throw new InvalidArgumentError('dataPtr.byteLength', dataPtr.byteLength, `the storage's ${this.byteLength} bytes (use resize() to change the size)`);
    }
    const previous = this.#dataPtr;
    dataPtr.hold(this);
    previous.letGo(this);
    this.#dataPtr = dataPtr;
    return previous;
  }

  /**
   * Changes the size of a resizable storage: allocates `nbytes`, copies the common prefix, frees the old data.
   *
   * Note [Resizing under tensors]: a storage does not know its tensors, so shrinking below a live tensor's
   * extent is allowed here (as PyTorch's `storage.resize_()` allows it); the tensor checks its extent against
   * the storage's size at every `data()` / `mutableData()` and throws InvalidArgumentError while it does not fit,
   * so no access ever reaches past the end. Growing the storage again makes it usable again.
   * @throws InvalidArgumentError when the storage is not resizable or `nbytes` is not a byte count
   */
  resize(nbytes: number): void {
    this.#checkLive('resize');
    checkByteCount('nbytes', nbytes);
    if (!this.resizable) throw new InvalidArgumentError('storage', 'a non-resizable storage', 'resizable to be resized');
    // Under LMS the storage stays pinned while its new block is allocated: that allocation may reclaim inactive
    // storages, and must not reclaim this one, whose bytes it is about to copy.
    const lms = this.lms;
    lms?.pin();
    try {
      this.#resizeTo(nbytes);
    } finally {
      lms?.unpin();
    }
  }

  #resizeTo(nbytes: number): void {
    const old = this.mutableData();
    const shared = typeof SharedArrayBuffer !== 'undefined' && old.handle instanceof SharedArrayBuffer;
    const next = this.allocator.allocate(nbytes, this.#allocateOptions ?? (shared ? { shared } : {}));
    try {
      this.allocator.copyData(next, old, Math.min(nbytes, old.byteLength));
    } catch (error) {
      next.release();
      throw error;
    }
    next.hold(this);
    old.letGo(this);
    this.#dataPtr = next;
    old.release();
  }

  /**
   * Frees the data (through the DataPtr's deleter). Idempotent; every later access throws. A `beforeRelease`
   * hook (or the LMS object's release) that throws does not stop it: every hook runs once, the storage and its
   * memory are released, then the error is thrown (an AggregateError for several).
   * @throws InvalidArgumentError while the storage is pinned by LMS (its LMS object is active): nothing changes
   */
  release(): void {
    if (this.#released) return;
    if (this.lms?.state === 'active') {
      throw new InvalidArgumentError('storage', 'a pinned storage', 'unpinned before it is released (every LmsStorage pin() matched by unpin())');
    }
    const errors: unknown[] = [];
    for (const hook of this.#hooks) {
      try {
        hook.beforeRelease?.(this);
      } catch (error) {
        errors.push(error);
      }
    }
    this.#released = true;
    try {
      this.lms?.release();
    } catch (error) {
      errors.push(error);
    }
    this.#dataPtr.letGo(this);
    if (!this.#dataPtr.isReleased) this.#dataPtr.release(); // the memory goes even when a hook or LMS failed
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateError(errors, `${errors.length} beforeRelease hooks failed; the storage was released anyway.`);
  }

  [Symbol.dispose](): void {
    this.release();
  }

  #checkLive(method: string): void {
    if (this.#released) {
      throw new UseAfterReleaseError(
        `Cannot call ${method}() on a ${this.#dataPtr.byteLength}-byte storage on ${formatDevice(this.device)}: it was released.`,
      );
    }
  }
}

/** Throws unless `dataPtr` is a live DataPtr that no storage holds. */
function checkPointer(argument: string, dataPtr: unknown): asserts dataPtr is DataPtr {
  if (!(dataPtr instanceof DataPtr)) throw new InvalidArgumentError(argument, dataPtr, 'a DataPtr');
  if (dataPtr.isReleased) throw new UseAfterReleaseError(`${argument} is a ${dataPtr.byteLength}-byte pointer that was already released.`);
  if (dataPtr.holder !== null) throw new InvalidArgumentError(argument, dataPtr, 'a pointer no live storage holds (one storage owns a pointer; release that storage, or copy its bytes)');
}
