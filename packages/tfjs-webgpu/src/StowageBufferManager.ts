import type { Runtime, StorageImpl } from '@stowage/core';
import type { WebGpuAllocator } from '@stowage/allocator-webgpu';
import type { BufferManager } from '@tensorflow/tfjs-backend-webgpu/dist/buffer_manager.js';

/** GPUBufferUsage STORAGE | COPY_SRC | COPY_DST (spec values): a tfjs tensor's buffer. */
export const TENSOR_USAGE = 0x0080 | 0x0004 | 0x0008;

/**
 * The buffer manager of the Stowage backend: tensor storage (STORAGE | COPY_SRC | COPY_DST) as Stowage storages,
 * binding ranges of the WebGPU allocator's segments; every other buffer (uniforms, query and readback buffers, and
 * a whole buffer a caller asks for with `dataToGPU`) from tfjs's own BufferManager, which it wraps.
 *
 * Uniforms stay with tfjs's manager: its `makeUniforms` packs them, writes the buffer and binds it whole at offset
 * 0, so a range of a Stowage segment could only be had by writing that packing again; they are a few hundred bytes,
 * pooled by exact size (a few dozen buffers per model). Staging is Stowage's: reads go through the allocator's
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
    readonly allocator: WebGpuAllocator,
    /** The device tensors live on, as the runtime names it (`webgpu:0`). */
    readonly device: string,
    /** tfjs's own manager, for the buffers that are not tensor storage. */
    readonly whole: BufferManager,
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

  /** Whether `storage` came from `acquireStorage` and is live. */
  owns(storage: StorageImpl): boolean {
    return this.#live.has(storage);
  }

  /** tfjs's BufferManager#acquireBuffer: a whole buffer from its pool. */
  acquireBuffer(size: number, usage: GPUBufferUsageFlags, mappedAtCreation = false, reuse = true): GPUBuffer {
    return this.whole.acquireBuffer(size, usage, mappedAtCreation, reuse);
  }

  /** tfjs's BufferManager#releaseBuffer. */
  releaseBuffer(buffer: GPUBuffer, reuse = true): void {
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
