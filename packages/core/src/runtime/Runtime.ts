import type { DependencyContainer } from 'tsyringe';
import type { Allocator } from '../contracts/Allocator.js';
import type { Token } from '../contracts/Token.js';
import { DataPtr } from '../storage/DataPtr.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import type { AllocatorRegistry } from './AllocatorRegistry.js';
import type { Device, DeviceLike } from '../contracts/Device.js';
import { formatDevice, parseDevice } from '../contracts/Device.js';
import type { DType } from '../contracts/DType.js';
import { checkDType, itemsizeOf } from '../contracts/DType.js';
import { DisposedError } from '../errors/DisposedError.js';
import { DisposeFailedError } from '../errors/DisposeFailedError.js';
import { ForeignPointerError } from '../errors/ForeignPointerError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { formatBytes } from '../units/formatBytes.js';
import { isAllocatorDeleter } from '../internal/allocatorDeleters.js';
import { checkBoolean, checkByteCount, checkBytes, checkOptions, checkRange } from '../validation/validate.js';
import { checkSizes, numelOf } from '../internal/shape.js';
import type { ReshapePolicy } from '../contracts/ReshapePolicy.js';
import type { StorageHooks } from '../contracts/StorageHooks.js';
import type { TensorHooks } from '../contracts/TensorHooks.js';
import { StorageImpl } from '../storage/StorageImpl.js';
import type { TensorContext } from '../storage/TensorImpl.js';
import { TensorImpl } from '../storage/TensorImpl.js';

export interface StorageOptions {
  /** Default `'cpu'`. */
  readonly device?: DeviceLike;
  /** cpu: SharedArrayBuffer-backed, so that it can cross worker_threads. */
  readonly shared?: boolean;
  /** Whether `resize()` is allowed. Default false. */
  readonly resizable?: boolean;
}

export interface TensorOptions {
  /** Default `'float32'`. */
  readonly dtype?: DType;
  /** Default `'cpu'`. */
  readonly device?: DeviceLike;
  readonly shared?: boolean;
}

const STORAGE_OPTION_KEYS = ['device', 'shared', 'resizable'] as const;
const TENSOR_OPTION_KEYS = ['dtype', 'device', 'shared'] as const;

/** The services a runtime is built from; `createRuntime` resolves them from the runtime's container. */
export interface RuntimeServices {
  readonly container: DependencyContainer;
  readonly allocators: AllocatorRegistry;
  readonly reshapePolicy: ReshapePolicy;
  readonly storageHooks: readonly StorageHooks[];
  readonly tensorHooks?: readonly TensorHooks[];
}

/**
 * A composed runtime: its own child container, allocators per device, storages and tensors. Two runtimes share
 * no state. Make one with `createRuntime({ plugins })`.
 *
 * Invariant: `live` holds exactly the storages made with this runtime's hooks that are not released.
 */
export class Runtime implements TensorContext, AsyncDisposable {
  readonly container: DependencyContainer;
  readonly reshapePolicy: ReshapePolicy;
  readonly tensorHooks: readonly TensorHooks[];
  readonly #allocators: AllocatorRegistry;
  readonly #hooks: readonly StorageHooks[];
  readonly #live = new Set<StorageImpl>();
  #disposed = false;

  constructor(services: RuntimeServices) {
    this.container = services.container;
    this.reshapePolicy = services.reshapePolicy;
    this.tensorHooks = services.tensorHooks ?? [];
    this.#allocators = services.allocators;
    const track: StorageHooks = {
      afterCreate: (storage) => void this.#live.add(storage),
      beforeRelease: (storage) => void this.#live.delete(storage),
    };
    this.#hooks = [...services.storageHooks, track];
  }

  /** Device types this runtime can allocate on. */
  get deviceTypes(): string[] {
    return this.#allocators.deviceTypes;
  }

  /**
   * The allocator for `device` (made on first use).
   * @throws BackendUnavailableError when no plugin serves the device
   */
  allocator(device: DeviceLike = 'cpu'): Allocator {
    this.#checkOpen('allocator');
    return this.#allocators.get(device);
  }

  /**
   * A device service (Note [Device services]): what `device` offers under `token` beyond allocating, e.g.
   * `rt.service(Pager, 'webgpu:0')`. Makes the device's allocator first, as `allocator(device)` does.
   * @returns the service, or undefined when the device offers none under that token
   * @throws BackendUnavailableError when no plugin serves the device
   */
  service<T>(token: Token<T>, device: DeviceLike = 'cpu'): T | undefined {
    this.#checkOpen('service');
    return this.#allocators.service(token, parseDevice(device, 'device'));
  }

  /**
   * A new storage of `nbytes` bytes (contents unspecified).
   * @throws InvalidArgumentError for a bad size or device; BackendUnavailableError for a device with no plugin;
   * OutOfMemoryError when the device is full
   */
  storage(nbytes: number, options?: StorageOptions): StorageImpl {
    this.#checkOpen('storage');
    checkByteCount('nbytes', nbytes);
    const checked = checkOptions('options', options, STORAGE_OPTION_KEYS);
    const shared = checkBoolean('options.shared', checked.shared);
    const resizable = checkBoolean('options.resizable', checked.resizable) ?? false;
    const allocator = this.#allocators.get(parseDevice(checked.device === undefined ? 'cpu' : checked.device, 'options.device'));
    const allocateOptions = shared === undefined ? {} : { shared };
    const dataPtr = allocator.allocate(nbytes, allocateOptions);
    let storage: StorageImpl;
    try {
      storage = new StorageImpl({ dataPtr, allocator, resizable, hooks: this.#hooks, allocateOptions });
    } catch (error) {
      dataPtr.release();
      throw error;
    }
    return storage;
  }

  /**
   * Wraps a pointer that one of this runtime's allocators made, or imported (a caller's GPUBuffer, shared
   * memory), in a storage with the runtime's hooks. The storage owns the pointer: releasing it releases the
   * pointer.
   * @throws BackendUnavailableError when no allocator serves the pointer's device; UseAfterReleaseError for a
   * released pointer; ForeignPointerError for a pointer another allocator (another runtime's) made;
   * InvalidArgumentError for a pointer a live storage already holds (adopting it twice would give two storages
   * owning one allocation: Note [One holder per pointer] in DataPtr.ts)
   */
  adopt(dataPtr: DataPtr): StorageImpl {
    this.#checkOpen('adopt');
    if (!(dataPtr instanceof DataPtr)) throw new InvalidArgumentError('dataPtr', dataPtr, 'a DataPtr');
    if (dataPtr.isReleased) throw new UseAfterReleaseError('Cannot adopt a released pointer.');
    if (dataPtr.holder !== null) {
      throw new InvalidArgumentError('dataPtr', dataPtr, 'a pointer no live storage holds: it was adopted already, or belongs to a storage (one storage owns a pointer)');
    }
    const allocator = this.#allocators.get(dataPtr.device);
    if (isAllocatorDeleter(dataPtr.deleter) && !(allocator.owns?.(dataPtr) ?? false)) {
      throw new ForeignPointerError(
        `Cannot adopt a pointer another allocator made (another runtime's, or one made outside this runtime): its memory is that allocator's to free. Copy its bytes into a storage of this runtime instead.`,
      );
    }
    return new StorageImpl({ dataPtr, allocator, hooks: this.#hooks });
  }

  /** A new contiguous tensor of `sizes` over a new storage. Same errors as `storage()`, plus bad sizes/dtype. */
  tensor(sizes: readonly number[], options?: TensorOptions): TensorImpl {
    this.#checkOpen('tensor');
    const shape = checkSizes('sizes', sizes);
    const checked = checkOptions('options', options, TENSOR_OPTION_KEYS);
    const dtype = checkDType('options.dtype', checked.dtype === undefined ? 'float32' : checked.dtype);
    const shared = checkBoolean('options.shared', checked.shared);
    const nbytes = numelOf(shape) * itemsizeOf(dtype);
    checkByteCount('sizes (as bytes)', nbytes);
    const storage = this.storage(nbytes, {
      device: checked.device === undefined ? 'cpu' : checked.device,
      ...(shared === undefined ? {} : { shared }),
    });
    return new TensorImpl(storage, { sizes: shape, dtype }, this);
  }

  /** TensorContext: a storage for a tensor's copy. */
  createStorage(nbytes: number, device: Device): StorageImpl {
    return this.storage(nbytes, { device });
  }

  /**
   * Copies host bytes into `storage` at `offset` (the write path: COW storages materialize first).
   * @throws InvalidArgumentError when the bytes run past the storage; UseAfterReleaseError for a released storage;
   * ForeignPointerError for a storage of another runtime; under LMS, what bringing a reclaimed storage back throws
   * (`@stowage/lms`'s PageInPendingError while its bytes are still on their way to the host: `write` cannot wait,
   * so await `storage.lms.ready()` first; `read` waits by itself)
   */
  write(storage: StorageImpl, bytes: ArrayBufferView, offset = 0): void {
    this.#checkOpen('write');
    this.#checkStorage(storage);
    const data = checkBytes('bytes', bytes);
    checkByteCount('offset', offset);
    checkRange('bytes.byteLength', offset, data.byteLength, storage.byteLength, 'storage');
    storage.allocator.writeBytes(storage.mutableData(), data, offset);
  }

  /** Resolves to a host copy of the storage's bytes (the read path: never materializes). */
  read(storage: StorageImpl): Promise<Uint8Array> {
    this.#checkOpen('read');
    this.#checkStorage(storage);
    const lms = storage.lms;
    if (lms !== null && lms.state === 'reclaimed') {
      // Its bytes are on the host already (or on their way): read them there rather than bring the storage back.
      const hostCopy = lms.readHostCopy?.();
      if (hostCopy) return hostCopy;
      return lms.ready().then(() => storage.allocator.readBytes(storage.data()));
    }
    return storage.allocator.readBytes(storage.data());
  }

  /** A readable table of every allocator this runtime has made: allocated, peak, reserved, live allocations. */
  memorySummary(): string {
    this.#checkOpen('memorySummary');
    const rows = [['device', 'allocated', 'peak allocated', 'reserved', 'peak reserved', 'allocations', 'device mallocs']];
    for (const [key, allocator] of this.#allocators.created) {
      const s = allocator.memoryStats();
      rows.push([
        key,
        formatBytes(s['allocated_bytes.all.current']),
        formatBytes(s['allocated_bytes.all.peak']),
        formatBytes(s['reserved_bytes.all.current']),
        formatBytes(s['reserved_bytes.all.peak']),
        String(s['allocation.all.current']),
        String(s['num_device_alloc']),
      ]);
    }
    const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
    return rows.map((r) => r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ')).join('\n');
  }

  /** True once `dispose()` was called: every method but `dispose` then throws DisposedError. */
  get isDisposed(): boolean {
    return this.#disposed;
  }

  /**
   * Releases every live storage, disposes the allocators and the container. Idempotent.
   * @throws DisposeFailedError when releasing some storage threw (a storage still pinned under LMS, a hook that
   *   threw): everything was freed all the same, and the error lists what each release threw
   */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    const errors: unknown[] = [];
    for (const storage of [...this.#live]) {
      try {
        storage.release();
      } catch (error) {
        errors.push(error); // a throwing hook must not keep the allocators from freeing their memory
      }
    }
    try {
      this.#allocators.dispose();
    } catch (error) {
      errors.push(...(error instanceof AggregateError ? error.errors : [error]));
    }
    await this.container.dispose();
    if (errors.length > 0) throw new DisposeFailedError(errors, { cause: errors[0] });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  #checkStorage(storage: StorageImpl): void {
    if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl');
    if (!this.#allocators.owns(storage.allocator)) {
      throw new ForeignPointerError(`The storage on ${formatDevice(storage.device)} belongs to another runtime; use that runtime's read()/write().`);
    }
  }

  #checkOpen(method: string): void {
    if (this.#disposed) throw new DisposedError(`Cannot call ${method}() on a disposed runtime.`);
  }
}
