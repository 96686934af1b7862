import type { WebGpuContext } from '@stowage/allocator-webgpu';
import type { ReplayAllocator } from './ReplayAllocator.js';
import { TENSOR_USAGE } from './ReplayAllocator.js';

/** Frees between the allocator's own empty submits, when the program submits less often. */
const SUBMIT_EVERY_FREES = 64;

/**
 * No caching: one `createBuffer` per allocation (size rounded up to 4) and `destroy()` per free. `destroy` frees
 * nothing before the queue moves on, so the allocator submits after every {@link SUBMIT_EVERY_FREES} frees of
 * its own besides the program's submits. `reservedBytes` counts buffers not yet destroyed; destroyed ones Dawn
 * has not reclaimed yet show only in the process's resident memory.
 */
export class RawReplayAllocator implements ReplayAllocator<GPUBuffer> {
  readonly name = 'raw';
  readonly #device: GPUDevice;
  readonly #live = new Set<GPUBuffer>();
  #reservedBytes = 0;
  #peakReservedBytes = 0;
  #createBufferCalls = 0;
  #freesSinceSubmit = 0;

  constructor(context: WebGpuContext) {
    this.#device = context.device;
  }

  allocate(bytes: number): GPUBuffer {
    const size = Math.ceil(bytes / 4) * 4;
    const buffer = this.#device.createBuffer({ size, usage: TENSOR_USAGE });
    this.#createBufferCalls++;
    this.#live.add(buffer);
    this.#reservedBytes += size;
    if (this.#reservedBytes > this.#peakReservedBytes) this.#peakReservedBytes = this.#reservedBytes;
    return buffer;
  }

  free(handle: GPUBuffer): void {
    this.#live.delete(handle);
    this.#reservedBytes -= handle.size;
    handle.destroy();
    if (++this.#freesSinceSubmit >= SUBMIT_EVERY_FREES) this.submit();
  }

  submit(): void {
    this.#freesSinceSubmit = 0;
    this.#device.queue.submit([]);
  }

  get reservedBytes(): number {
    return this.#reservedBytes;
  }

  get peakReservedBytes(): number {
    return this.#peakReservedBytes;
  }

  get createBufferCalls(): number {
    return this.#createBufferCalls;
  }

  resetPeak(): void {
    this.#peakReservedBytes = this.#reservedBytes;
  }

  dispose(): void {
    for (const buffer of this.#live) buffer.destroy();
    this.#live.clear();
    this.#reservedBytes = 0;
  }
}
