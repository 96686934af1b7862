import { BufferUsage } from './WebGpuUsage.js';

/**
 * Readback buffers (MAP_READ|COPY_DST) pooled by power-of-two size: the readback ring of host transfers. A
 * mappable buffer is mapped whole, so it is never sub-allocated: each read takes one and gives it back
 * unmapped. (Uploads need no pool: `queue.writeBuffer` stages them inside the implementation.)
 *
 * Invariants: every pooled buffer is unmapped and idle; pooledBytes <= maxPooledBytes.
 */
export class StagingPool {
  readonly #free = new Map<number, GPUBuffer[]>();
  #pooledBytes = 0;

  constructor(
    private readonly device: GPUDevice,
    /** Pooled bytes kept at most; beyond it returned buffers are destroyed. */
    private readonly maxPooledBytes: number,
    /** The largest buffer the device makes (its maxBufferSize, need not be a power of two). */
    private readonly maxBufferSize: number = device.limits.maxBufferSize,
  ) {}

  get pooledBytes(): number {
    return this.#pooledBytes;
  }

  /**
   * An unmapped readback buffer of at least `bytes`: a power of two (256 B minimum), or the device's largest
   * buffer when that power of two would pass it.
   */
  take(bytes: number): GPUBuffer {
    const size = roundedBufferSize(bytes, 256, this.maxBufferSize);
    const pooled = this.#free.get(size)?.pop();
    if (pooled) {
      this.#pooledBytes -= size;
      return pooled;
    }
    return this.device.createBuffer({ size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: 'stowage readback' });
  }

  /** Returns a buffer after `unmap()`. */
  give(buffer: GPUBuffer): void {
    if (this.#pooledBytes + buffer.size > this.maxPooledBytes) {
      buffer.destroy();
      return;
    }
    let list = this.#free.get(buffer.size);
    if (!list) this.#free.set(buffer.size, (list = []));
    list.push(buffer);
    this.#pooledBytes += buffer.size;
  }

  /** Destroys the pooled buffers; the pool stays usable (reads in flight give theirs back afterwards). */
  clear(): void {
    for (const list of this.#free.values()) for (const buffer of list) buffer.destroy();
    this.#free.clear();
    this.#pooledBytes = 0;
  }

  dispose(): void {
    this.clear();
  }
}

/**
 * `bytes` rounded up to a power of two of at least `min`, capped at `maxBufferSize` rounded down to whole
 * 4-byte words (WebGPU allows any maxBufferSize; a buffer over it fails validation).
 */
export function roundedBufferSize(bytes: number, min: number, maxBufferSize: number): number {
  const pow2 = Math.max(min, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
  return Math.max(Math.ceil(bytes / 4) * 4, Math.min(pow2, Math.floor(maxBufferSize / 4) * 4));
}
