import type { CudaDriver, PinnedHostMemory } from '../driver/CudaDriver.js';

const MIN_PINNED_BYTES = 64 * 1024;

/** The pool size class of a request: a power of two, at least 64 KiB. */
function pinnedSizeOf(byteLength: number): number {
  return Math.max(MIN_PINNED_BYTES, 2 ** Math.ceil(Math.log2(Math.max(1, byteLength))));
}

/**
 * Page-locked host buffers for asynchronous copies, cached by power-of-two size as PyTorch's host allocator caches
 * them (cuMemHostAlloc is slow: it maps the pages for the device). Buffers go back to the pool, never to the
 * driver, until `dispose`.
 *
 * Invariants: a buffer is either handed out or in its size's free list, never both; `reservedBytes` is the sum of
 * all buffers' sizes.
 */
export class PinnedPool {
  readonly #free = new Map<number, PinnedHostMemory[]>();
  readonly #all: PinnedHostMemory[] = [];
  reservedBytes = 0;

  constructor(
    private readonly driver: CudaDriver,
    /** Makes the device's context current (cuMemHostAlloc needs one). */
    private readonly enter: () => void,
  ) {}

  /** A buffer of at least `byteLength` bytes (its `bytes` view is exactly the pool size). */
  take(byteLength: number): PinnedHostMemory {
    const size = pinnedSizeOf(byteLength);
    const cached = this.#free.get(size)?.pop();
    if (cached !== undefined) return cached;
    this.enter();
    const buffer = this.driver.memHostAlloc(size);
    this.#all.push(buffer);
    this.reservedBytes += size;
    return buffer;
  }

  give(buffer: PinnedHostMemory): void {
    const size = buffer.bytes.byteLength;
    let list = this.#free.get(size);
    if (list === undefined) this.#free.set(size, (list = []));
    list.push(buffer);
  }

  /** Returns every buffer to the driver; none may be in use. */
  dispose(): void {
    for (const buffer of this.#all.splice(0)) this.driver.memFreeHost(buffer.address);
    this.#free.clear();
    this.reservedBytes = 0;
  }
}
