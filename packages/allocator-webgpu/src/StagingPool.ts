import { BufferUsage } from './WebGpuUsage.js';

/**
 * Mappable staging buffers (upload: MAP_WRITE|COPY_SRC, readback: MAP_READ|COPY_DST) pooled by power-of-two
 * size. A staging buffer is mapped whole, so it is never sub-allocated: each transfer takes one, and gives it
 * back unmapped (readback) or mapped at creation (upload, `mappedAtCreation`).
 *
 * Invariant: every pooled buffer is idle (unmapped readback, or destroyed-on-return upload).
 */
export class StagingPool {
  readonly #free = new Map<number, GPUBuffer[]>();
  #pooledBytes = 0;

  constructor(
    private readonly device: GPUDevice,
    private readonly kind: 'upload' | 'readback',
    /** Pooled bytes kept at most; beyond it returned buffers are destroyed. */
    private readonly maxPooledBytes: number,
  ) {}

  get pooledBytes(): number {
    return this.#pooledBytes;
  }

  /** A buffer of at least `bytes` (a power of two, 256 B minimum). Upload buffers come mapped. */
  take(bytes: number): GPUBuffer {
    const size = Math.max(256, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
    if (this.kind === 'readback') {
      const pooled = this.#free.get(size)?.pop();
      if (pooled) {
        this.#pooledBytes -= size;
        return pooled;
      }
      return this.device.createBuffer({ size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: 'stowage readback' });
    }
    return this.device.createBuffer({ size, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: 'stowage upload' });
  }

  /** Returns a readback buffer after `unmap()`; upload buffers are destroyed once their copy was submitted. */
  give(buffer: GPUBuffer): void {
    if (this.kind === 'upload' || this.#pooledBytes + buffer.size > this.maxPooledBytes) {
      buffer.destroy();
      return;
    }
    let list = this.#free.get(buffer.size);
    if (!list) this.#free.set(buffer.size, (list = []));
    list.push(buffer);
    this.#pooledBytes += buffer.size;
  }

  dispose(): void {
    for (const list of this.#free.values()) for (const buffer of list) buffer.destroy();
    this.#free.clear();
    this.#pooledBytes = 0;
  }
}
