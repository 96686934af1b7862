import type { DataPtr } from '@stowage/core';
import type { WebGpuAllocator, WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator } from '@stowage/allocator-webgpu';
import type { ReplayAllocator } from './ReplayAllocator.js';

/** The allocator's budget in the bench: above the 4 GiB at which the bench stops any allocator. */
const LIMIT = '8GiB';

/**
 * Stowage's WebGPU caching allocator (default preset) as a replay allocator. Frees return to the pool at the next
 * `queue.submit` by anyone (Note [Submit epochs] in SubmitEpochs.ts), so `submit()` is a plain empty submit.
 */
export class StowageReplayAllocator implements ReplayAllocator<DataPtr> {
  readonly name = 'stowage';
  readonly allocator: WebGpuAllocator;
  readonly #queue: GPUQueue;

  constructor(context: WebGpuContext) {
    this.allocator = createWebGpuAllocator(context, { limit: LIMIT });
    this.#queue = context.device.queue;
  }

  allocate(bytes: number): DataPtr {
    return this.allocator.allocate(bytes);
  }

  free(handle: DataPtr): void {
    this.allocator.free(handle);
  }

  submit(): void {
    this.#queue.submit([]);
  }

  get reservedBytes(): number {
    return this.allocator.backend.reservedBytes;
  }

  get peakReservedBytes(): number {
    return this.allocator.memoryStats()['reserved_bytes.all.peak'];
  }

  /** Segments created: the backend's count (staging and scratch buffers are not counted; the replay uses none). */
  get createBufferCalls(): number {
    return this.allocator.backend.createdBuffers;
  }

  resetPeak(): void {
    this.allocator.resetPeakStats();
  }

  dispose(): void {
    this.allocator.dispose();
  }
}
