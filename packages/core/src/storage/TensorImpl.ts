import type { Device } from '../contracts/Device.js';
import { formatDevice } from '../contracts/Device.js';
import type { DType } from '../contracts/DType.js';
import { checkDType, itemsizeOf } from '../contracts/DType.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import type { DataPtr } from './DataPtr.js';
import type { ReshapePolicy } from '../contracts/ReshapePolicy.js';
import type { TensorHooks } from '../contracts/TensorHooks.js';
import { StorageImpl } from './StorageImpl.js';
import { checkCount, checkOptions, checkReturned } from '../validation/validate.js';
import { describeValue } from '../validation/describeValue.js';
import {
  checkSizes,
  checkStrides,
  contiguousStrides,
  extentOf,
  inferSizes,
  isContiguousLayout,
  numelOf,
} from '../internal/shape.js';
import { viewStrides } from './viewStrides.js';

/** What a tensor needs from the runtime that made it: new storages and the reshape policy. */
export interface TensorContext {
  /** A new storage of `nbytes` on `device`, with the runtime's hooks and LMS wiring. */
  createStorage(nbytes: number, device: Device): StorageImpl;
  readonly reshapePolicy: ReshapePolicy;
  /** Hooks run on tensor-level reads and writes (none when absent). */
  readonly tensorHooks?: readonly TensorHooks[];
}

export interface TensorLayout {
  readonly sizes: readonly number[];
  /** In elements; row-major contiguous when absent. */
  readonly strides?: readonly number[];
  /** In elements from the storage's start; 0 when absent. */
  readonly storageOffset?: number;
  readonly dtype: DType;
}

/**
 * A strided view of a storage, after c10's TensorImpl. Tensors alias if and only if they share a StorageImpl.
 *
 * Invariants: (storageOffset + extent(sizes, strides)) * itemsize <= storage.byteLength;
 * every size and stride is a non-negative safe integer.
 */
export class TensorImpl {
  readonly storage: StorageImpl;
  readonly sizes: readonly number[];
  readonly strides: readonly number[];
  readonly storageOffset: number;
  readonly dtype: DType;
  readonly itemsize: number;
  readonly numel: number;
  /**
   * The view family a reshape policy assigned (the warning mode's shadow storage); null for the storage's own
   * family. Views inherit it.
   */
  readonly shadow: object | null;
  readonly #context: TensorContext;
  /** Bytes of the storage this tensor reaches: (storageOffset + extent) * itemsize, 0 when empty. */
  readonly #neededBytes: number;

  /**
   * @throws InvalidArgumentError for a bad shape, stride, offset or dtype, a layout that does not fit the storage,
   * a storage that is not a StorageImpl, a context without `createStorage` and `reshapePolicy`, or a shadow that is
   * not an object or null
   * @throws UseAfterReleaseError when the storage was released
   */
  constructor(storage: StorageImpl, layout: TensorLayout, context: TensorContext, shadow: object | null = null) {
    if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('storage', storage, 'a StorageImpl');
    checkContext(context);
    if (typeof shadow !== 'object') throw new InvalidArgumentError('shadow', shadow, 'an object or null');
    checkOptions('layout', layout, ['sizes', 'strides', 'storageOffset', 'dtype']);
    if (storage.isReleased) throw new UseAfterReleaseError('Cannot make a tensor over a released storage.');
    const dtype = checkDType('dtype', layout.dtype);
    const sizes = checkSizes('sizes', layout.sizes);
    const strides = layout.strides === undefined ? contiguousStrides(sizes) : checkStrides('strides', layout.strides, sizes.length);
    const storageOffset = checkCount('storageOffset', layout.storageOffset ?? 0);
    const itemsize = itemsizeOf(dtype);
    const extent = extentOf(sizes, strides);
    const neededBytes = extent === 0 ? 0 : (storageOffset + extent) * itemsize;
    if (neededBytes > storage.byteLength) {
      throw new InvalidArgumentError(
        'sizes/strides/storageOffset',
        { sizes, strides, storageOffset },
        `a layout that fits the storage's ${storage.byteLength} bytes (it reaches byte ${neededBytes} as ${dtype})`,
      );
    }
    this.storage = storage;
    this.sizes = Object.freeze(sizes);
    this.strides = Object.freeze(strides);
    this.storageOffset = storageOffset;
    this.dtype = dtype;
    this.itemsize = itemsize;
    this.numel = numelOf(sizes);
    this.shadow = shadow;
    this.#context = context;
    this.#neededBytes = neededBytes;
  }

  /**
   * The storage's DataPtr for reading, after the runtime's tensor hooks.
   * @throws InvalidArgumentError while the storage was resized below this tensor's extent (Note [Resizing under
   * tensors] in StorageImpl.ts); UseAfterReleaseError once the storage was released
   */
  data(): DataPtr {
    this.#checkFits();
    for (const hook of this.#context.tensorHooks ?? []) hook.beforeRead?.(this);
    return this.storage.data();
  }

  /** The storage's DataPtr for writing (COW materializes), after the runtime's tensor hooks. Same errors as `data()`. */
  mutableData(): DataPtr {
    this.#checkFits();
    for (const hook of this.#context.tensorHooks ?? []) hook.beforeWrite?.(this);
    return this.storage.mutableData();
  }

  /** This tensor's layout as a tensor of another view family (`shadow`), over the same storage. */
  withShadow(shadow: object | null): TensorImpl {
    return new TensorImpl(this.storage, { sizes: this.sizes, strides: this.strides, storageOffset: this.storageOffset, dtype: this.dtype }, this.#context, shadow);
  }

  get device(): Device {
    return this.storage.device;
  }

  get dim(): number {
    return this.sizes.length;
  }

  /** Byte offset of element 0 in the storage. */
  get byteOffset(): number {
    return this.storageOffset * this.itemsize;
  }

  isContiguous(): boolean {
    return isContiguousLayout(this.sizes, this.strides);
  }

  /** A tensor of this tensor's dtype over `storage` (a lazy copy, say) with the given layout; same context. */
  withStorage(storage: StorageImpl, layout: Omit<TensorLayout, 'dtype'>): TensorImpl {
    return new TensorImpl(storage, { ...layout, dtype: this.dtype }, this.#context);
  }

  /** A tensor over the same storage with the given layout (in elements). Same errors as the constructor. */
  asStrided(sizes: readonly number[], strides: readonly number[], storageOffset: number = this.storageOffset): TensorImpl {
    return new TensorImpl(this.storage, { sizes, strides, storageOffset, dtype: this.dtype }, this.#context, this.shadow);
  }

  /**
   * A view of `sizes` (one may be -1) sharing this tensor's storage.
   * @throws InvalidArgumentError when the element count differs, or when the layout cannot be viewed that way
   * (use `reshape()`, which copies when it must)
   */
  view(sizes: readonly number[]): TensorImpl {
    const newSizes = inferSizes('sizes', sizes, this.numel);
    const strides = viewStrides(this.sizes, this.strides, newSizes);
    if (strides === null) {
      throw new InvalidArgumentError(
        'sizes',
        sizes,
        `compatible with the tensor's layout (sizes [${this.sizes.join(', ')}], strides [${this.strides.join(', ')}]); call reshape() to copy instead`,
      );
    }
    return this.asStrided(newSizes, strides);
  }

  /** A tensor of `sizes` (one may be -1), as the runtime's reshape policy decides: a view, a copy or a lazy copy. */
  reshape(sizes: readonly number[]): TensorImpl {
    const newSizes = inferSizes('sizes', sizes, this.numel);
    const policy = this.#context.reshapePolicy;
    const result: unknown = policy.reshape(this, newSizes);
    return checkReturned(
      `the reshape policy ${describeValue(policy.name)} (reshape([${newSizes.join(', ')}]))`,
      result,
      (value): value is TensorImpl =>
        value instanceof TensorImpl && value.dtype === this.dtype && value.sizes.length === newSizes.length && value.sizes.every((n, i) => n === newSizes[i]),
      `a ${this.dtype} TensorImpl of sizes [${newSizes.join(', ')}]`,
    );
  }

  /** This tensor when it is contiguous, otherwise a contiguous copy over a new storage. */
  contiguous(): TensorImpl {
    return this.isContiguous() ? this : this.clone();
  }

  /** A contiguous copy over a new storage on the same device. */
  clone(): TensorImpl {
    const storage = this.#context.createStorage(this.numel * this.itemsize, this.device);
    try {
      const out = new TensorImpl(storage, { sizes: this.sizes, dtype: this.dtype }, this.#context);
      copyElements(this, out);
      return out;
    } catch (error) {
      storage.release();
      throw error;
    }
  }

  #checkFits(): void {
    if (this.#neededBytes > this.storage.byteLength && !this.storage.isReleased) {
      throw new InvalidArgumentError(
        'storage',
        `a ${this.storage.byteLength}-byte storage`,
        `at least ${this.#neededBytes} bytes for ${this.toString()}: the storage was resized below the tensor's extent`,
      );
    }
  }

  /** A human-readable one-liner: `TensorImpl(float32[2, 3] on cpu:0, strides [3, 1], offset 0)`. */
  toString(): string {
    return `TensorImpl(${this.dtype}[${this.sizes.join(', ')}] on ${formatDevice(this.device)}, strides [${this.strides.join(', ')}], offset ${this.storageOffset})`;
  }
}

/** Throws unless `context` has what a tensor uses: `createStorage` and a reshape policy with `reshape`. */
function checkContext(context: unknown): void {
  const c = context as Partial<TensorContext> | null;
  if (typeof c !== 'object' || c === null || typeof c.createStorage !== 'function' || typeof c.reshapePolicy?.reshape !== 'function') {
    throw new InvalidArgumentError('context', context, 'a TensorContext: an object with createStorage(nbytes, device) and reshapePolicy (a runtime)');
  }
  if (c.tensorHooks !== undefined && !Array.isArray(c.tensorHooks)) throw new InvalidArgumentError('context.tensorHooks', c.tensorHooks, 'an array of TensorHooks, or absent');
}

/**
 * Copies the elements of `src` into the contiguous tensor `dst` (same sizes and dtype) in row-major order,
 * one copyData per run of memory-contiguous elements.
 */
function copyElements(src: TensorImpl, dst: TensorImpl): void {
  const from = src.data(); // a read of the tensor: its hooks run, and a released storage throws (even when empty)
  const to = dst.mutableData();
  if (src.numel === 0) return;
  const allocator = dst.storage.allocator;
  const itemsize = src.itemsize;
  // Merge trailing dimensions that are contiguous in src into one run.
  let runElements = 1;
  let innerDims = 0;
  for (let d = src.dim - 1; d >= 0; d--) {
    if (src.sizes[d] !== 1 && src.strides[d] !== runElements) break;
    runElements *= src.sizes[d]!;
    innerDims++;
  }
  const outer = src.sizes.slice(0, src.dim - innerDims);
  const index = new Array<number>(outer.length).fill(0);
  const runBytes = runElements * itemsize;
  for (let dstElement = 0; dstElement < src.numel; dstElement += runElements) {
    let srcElement = src.storageOffset;
    for (let d = 0; d < outer.length; d++) srcElement += index[d]! * src.strides[d]!;
    allocator.copyData(to, from, runBytes, dst.byteOffset + dstElement * itemsize, srcElement * itemsize);
    for (let d = outer.length - 1; d >= 0; d--) {
      if (++index[d]! < outer[d]!) break;
      index[d] = 0;
    }
  }
}
