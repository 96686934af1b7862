import { BufferUsage } from './WebGpuUsage.js';

/**
 * Readback buffers (MAP_READ|COPY_DST): the staging of host reads and LMS page-outs, pooled by size. A mappable
 * buffer is mapped whole, so it is never sub-allocated: each read takes one and gives it back unmapped. (Uploads
 * need no pool: `queue.writeBuffer` stages them inside the implementation.)
 *
 * These buffers are device memory inside the device's one budget (Note [One budget] in DeviceBudget.ts):
 * the pool counts every buffer it made until it is destroyed, in flight or pooled, and gives pooled ones back to
 * the device (`trim`) when the budget needs their room. Sizes are rounded up to an eighth of their power of two
 * (at most 12.5 % over the request, 256 B at least), so a loop's repeated tensor sizes find their buffer again.
 *
 * Invariants: liveBytes == sum of sizes of the buffers made and not yet destroyed; pooledBytes == sum of sizes of
 * the pooled buffers (each unmapped and idle) <= liveBytes; pooledBytes <= maxPooledBytes; peakBytes >= liveBytes.
 */
export class StagingPool {
  readonly #free = new Map<number, GPUBuffer[]>();
  #pooledBytes = 0;
  #liveBytes = 0;
  #peakBytes = 0;

  constructor(
    private readonly device: GPUDevice,
    /** Pooled bytes kept at most; beyond it returned buffers are destroyed. */
    private readonly maxPooledBytes: number,
    /** The largest buffer the device makes (its maxBufferSize, need not be a power of two). */
    private readonly maxBufferSize: number = device.limits.maxBufferSize,
  ) {}

  /** Bytes of idle pooled buffers (inside liveBytes). */
  get pooledBytes(): number {
    return this.#pooledBytes;
  }

  /** Bytes of every staging buffer alive: in flight (taken) and pooled. */
  get liveBytes(): number {
    return this.#liveBytes;
  }

  /** Bytes of the buffers handed out and not given back: reads and page-outs in flight (liveBytes - pooledBytes). */
  get inFlightBytes(): number {
    return this.#liveBytes - this.#pooledBytes;
  }

  /** The most `liveBytes` since the pool was made. */
  get peakBytes(): number {
    return this.#peakBytes;
  }

  /** The size of the buffer `take(bytes)` hands out. */
  sizeFor(bytes: number): number {
    return stagingBufferSize(bytes, this.maxBufferSize);
  }

  /** True when a pooled buffer would serve `bytes`: taking it adds nothing to the device. */
  hasPooled(bytes: number): boolean {
    return (this.#free.get(this.sizeFor(bytes))?.length ?? 0) > 0;
  }

  /** An unmapped readback buffer of `sizeFor(bytes)` bytes, pooled if one is, else new. */
  take(bytes: number): GPUBuffer {
    const size = this.sizeFor(bytes);
    const pooled = this.#free.get(size)?.pop();
    if (pooled) {
      this.#pooledBytes -= size;
      return pooled;
    }
    const buffer = this.device.createBuffer({ size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: 'stowage readback' });
    this.#liveBytes += size;
    if (this.#liveBytes > this.#peakBytes) this.#peakBytes = this.#liveBytes;
    return buffer;
  }

  /** Returns a buffer after `unmap()`: pooled while the pool has room, else destroyed. */
  give(buffer: GPUBuffer): void {
    if (this.#pooledBytes + buffer.size > this.maxPooledBytes) {
      this.discard(buffer);
      return;
    }
    let list = this.#free.get(buffer.size);
    if (!list) this.#free.set(buffer.size, (list = []));
    list.push(buffer);
    this.#pooledBytes += buffer.size;
  }

  /** Destroys a buffer `take` handed out (one that failed, or one not to pool). */
  discard(buffer: GPUBuffer): void {
    this.#liveBytes -= buffer.size;
    buffer.destroy();
  }

  /** Destroys pooled buffers, largest first, until at least `bytes` went back to the device or none is left; returns the bytes freed. */
  trim(bytes: number): number {
    if (bytes <= 0 || this.#pooledBytes === 0) return 0;
    let freed = 0;
    for (const size of [...this.#free.keys()].sort((a, b) => b - a)) {
      const list = this.#free.get(size)!;
      while (list.length > 0 && freed < bytes) {
        this.discard(list.pop()!);
        this.#pooledBytes -= size;
        freed += size;
      }
      if (list.length === 0) this.#free.delete(size);
      if (freed >= bytes) break;
    }
    return freed;
  }

  /** Destroys the pooled buffers; the pool stays usable (reads in flight give theirs back afterwards). */
  clear(): void {
    this.trim(Number.POSITIVE_INFINITY);
  }

  dispose(): void {
    this.clear();
  }
}

/**
 * A staging buffer's size for `bytes`: rounded up to an eighth of its power of two (256 B at least, whole 4-byte
 * words), capped at `maxBufferSize` rounded down to whole words.
 */
export function stagingBufferSize(bytes: number, maxBufferSize: number): number {
  const words = Math.ceil(Math.max(bytes, 1) / 4) * 4;
  const step = Math.max(256, 2 ** Math.floor(Math.log2(words)) / 8);
  return Math.max(words, Math.min(Math.ceil(words / step) * step, Math.floor(maxBufferSize / 4) * 4));
}

/**
 * `bytes` rounded up to a power of two of at least `min`, capped at `maxBufferSize` rounded down to whole
 * 4-byte words (WebGPU allows any maxBufferSize; a buffer over it fails validation).
 */
export function roundedBufferSize(bytes: number, min: number, maxBufferSize: number): number {
  const pow2 = Math.max(min, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
  return Math.max(Math.ceil(bytes / 4) * 4, Math.min(pow2, Math.floor(maxBufferSize / 4) * 4));
}
