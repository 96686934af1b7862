import { BufferManager } from '@tensorflow/tfjs-backend-webgpu/dist/buffer_manager.js';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { CreateBufferCounter } from './CreateBufferCounter.js';
import type { ReplayAllocator } from './ReplayAllocator.js';
import { TENSOR_USAGE } from './ReplayAllocator.js';

/**
 * TensorFlow.js's WebGPU buffer manager (`BufferManager` of @tensorflow/tfjs-backend-webgpu 4.22), driven directly
 * on the bench's device: whole GPUBuffers cached in free lists keyed by exact (size, usage), never destroyed
 * before `dispose()`.
 *
 * Note [tfjs release at submit]: in tfjs's WebGPU backend (dist/backend_webgpu.js), a tensor buffer is acquired
 * with usage STORAGE | COPY_SRC | COPY_DST and the tensor's exact byte size. When a tensor is disposed
 * (`disposeData`) and its data id was bound by a program recorded since the last submit (`commandQueueOwnedIds`),
 * the id goes on `tensorDataPendingDisposal`; `submitQueue()` first calls `queue.submit`, then releases every
 * pending id's buffer to the manager (`releaseBuffer`, back to the free list for reuse) and clears the list. A
 * tensor not used since the last submit is released at once. The backend submits after every
 * WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE (15) dispatches and before reads. The replay cannot tell which freed
 * tensors were used since the last submit; in a tensor program a tensor dies right after its last consumer ran,
 * so this class treats every free as pending, released by the next `submit()` — the rule Stowage follows too.
 *
 * `reservedBytes` counts the buffers the manager created (it destroys none while caching): counted by wrapping
 * `device.createBuffer` while this allocator exists (CreateBufferCounter), restored by `dispose()`.
 */
export class TfjsReplayAllocator implements ReplayAllocator<GPUBuffer> {
  readonly name = 'tfjs';
  readonly #device: GPUDevice;
  readonly #manager: BufferManager;
  readonly #counter: CreateBufferCounter;
  /** Buffers freed since the last submit (tfjs's `tensorDataPendingDisposal`). */
  #pending: GPUBuffer[] = [];
  #peakReservedBytes = 0;
  #disposed = false;

  constructor(context: WebGpuContext) {
    this.#device = context.device;
    this.#counter = new CreateBufferCounter(context.device);
    this.#counter.install();
    this.#manager = new BufferManager(context.device);
  }

  allocate(bytes: number): GPUBuffer {
    const buffer = this.#manager.acquireBuffer(bytes, TENSOR_USAGE);
    if (this.#counter.bytes > this.#peakReservedBytes) this.#peakReservedBytes = this.#counter.bytes;
    return buffer;
  }

  free(handle: GPUBuffer): void {
    this.#pending.push(handle);
  }

  submit(): void {
    this.#device.queue.submit([]);
    const pending = this.#pending;
    this.#pending = [];
    for (const buffer of pending) this.#manager.releaseBuffer(buffer);
  }

  get reservedBytes(): number {
    return this.#counter.bytes;
  }

  get peakReservedBytes(): number {
    return this.#peakReservedBytes;
  }

  get createBufferCalls(): number {
    return this.#counter.calls;
  }

  resetPeak(): void {
    this.#peakReservedBytes = this.#counter.bytes;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#counter.uninstall();
    this.#pending = [];
    this.#manager.dispose();
  }
}
