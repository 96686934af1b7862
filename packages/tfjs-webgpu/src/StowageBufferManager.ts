import type { Runtime, StorageImpl } from '@stowage/core';
import type { WebGpuBuffers } from '@stowage/allocator-webgpu';
import type { BufferManager } from '@tensorflow/tfjs-backend-webgpu/dist/buffer_manager.js';
import type { UniformCapture } from './UniformCapture.js';
import { UNIFORM_USAGE } from './UniformCapture.js';

/** GPUBufferUsage STORAGE | COPY_SRC | COPY_DST (spec values): a tfjs tensor's buffer. */
export const TENSOR_USAGE = 0x0080 | 0x0004 | 0x0008;

/**
 * The buffer manager of the Stowage backend: tensor storage (STORAGE | COPY_SRC | COPY_DST) as Stowage storages,
 * binding ranges of the WebGPU allocator's segments; every other buffer (query and readback buffers, a whole buffer
 * a caller asks for with `dataToGPU`, uniforms unless they go through Stowage) from tfjs's own BufferManager, which
 * it wraps.
 *
 * Uniforms go to Stowage's uniform segments through a capture buffer (Note [Uniforms through Stowage]), or, with
 * `uniforms: 'tfjs'`, stay in tfjs's pool (by exact size). Staging is Stowage's: reads go through the allocator's
 * readback pool (`Runtime#read`) and uploads are `queue.writeBuffer` (`Runtime#write`), so tfjs's mapped staging
 * buffers are not used for tensors.
 *
 * Invariants: storageBytes == sum of byteLength over live storages; every live storage is in `#live` exactly once.
 */
export class StowageBufferManager {
  /** Bytes of the live tensor storages. */
  #storageBytes = 0;
  readonly #live = new Set<StorageImpl>();

  constructor(
    private readonly runtime: Runtime,
    /** The allocator behind `device` (the end of its upstream chain). */
    readonly allocator: WebGpuBuffers,
    /** The device tensors live on, as the runtime names it (`webgpu:0`). */
    readonly device: string,
    /** tfjs's own manager, for the buffers that are not tensor storage. */
    readonly whole: BufferManager,
    /** Where tfjs's uniforms go when they go through Stowage (Note [Uniforms through Stowage]); else null. */
    readonly uniformCapture: UniformCapture | null = null,
  ) {}

  /**
   * A storage for `byteLength` bytes of tensor data (contents unspecified).
   * @throws OutOfMemoryError when the allocator's budget is spent and nothing can be reclaimed
   */
  acquireStorage(byteLength: number): StorageImpl {
    const storage = this.runtime.storage(byteLength, { device: this.device });
    this.#live.add(storage);
    this.#storageBytes += storage.byteLength;
    return storage;
  }

  /**
   * Releases a storage from `acquireStorage` whose every use has been submitted (tfjs releases only then: Note
   * [Frees after their submit] in @stowage/allocator-webgpu), so its block is reusable at once.
   */
  releaseStorage(storage: StorageImpl): void {
    if (!this.#live.delete(storage)) return;
    this.#storageBytes -= storage.byteLength;
    this.allocator.freeingSubmitted(() => storage.release());
  }

  /** The live storages from `acquireStorage`. */
  get storages(): ReadonlySet<StorageImpl> {
    return this.#live;
  }

  /** Whether `storage` came from `acquireStorage` and is live. */
  owns(storage: StorageImpl): boolean {
    return this.#live.has(storage);
  }

  /**
   * tfjs's BufferManager#acquireBuffer: a whole buffer from its pool; for a dispatch's uniforms, the capture buffer
   * when uniforms go through Stowage.
   */
  acquireBuffer(size: number, usage: GPUBufferUsageFlags, mappedAtCreation = false, reuse = true): GPUBuffer {
    if (this.uniformCapture !== null && usage === UNIFORM_USAGE && !mappedAtCreation) return this.uniformCapture.buffer;
    return this.whole.acquireBuffer(size, usage, mappedAtCreation, reuse);
  }

  /** tfjs's BufferManager#releaseBuffer (the capture buffer is not the pool's: nothing to do). */
  releaseBuffer(buffer: GPUBuffer, reuse = true): void {
    if (buffer === this.uniformCapture?.buffer) return;
    this.whole.releaseBuffer(buffer, reuse);
  }

  /** Bytes in use: live tensor storages plus tfjs's whole buffers in use (tfjs's `numBytesInGPU`). */
  get numBytesUsed(): number {
    return this.#storageBytes + this.whole.numBytesUsed;
  }

  /** Bytes reserved on the device: the allocator's segments plus tfjs's whole buffers (`numBytesAllocatedInGPU`). */
  get numBytesAllocated(): number {
    return this.allocator.memoryStats()['reserved_bytes.all.current'] + this.whole.numBytesAllocated;
  }

  getNumUsedBuffers(): number {
    return this.#live.size + this.whole.getNumUsedBuffers();
  }

  getNumFreeBuffers(): number {
    return this.whole.getNumFreeBuffers();
  }

  /** Releases every live storage and tfjs's buffers (the backend is being disposed: no work is pending). */
  dispose(): void {
    for (const storage of this.#live) storage.release();
    this.#live.clear();
    this.#storageBytes = 0;
    this.whole.dispose();
  }
}
