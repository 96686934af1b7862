import type { AllocateOptions, Allocator, DataPtr } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';
import { ForwardingAllocator } from '@stowage/core';
import { BufferManager } from '@tensorflow/tfjs-backend-webgpu/dist/buffer_manager.js';

/** GPUBufferUsage STORAGE | COPY_SRC | COPY_DST: what tfjs's WebGPU backend acquires a tensor's buffer with. */
const TENSOR_USAGE = 0x0080 | 0x0004 | 0x0008;

/** The time of each allocation call, in nanoseconds, in call order. */
export interface AllocatorSamples {
  /** Each `allocate` of the Stowage WebGPU allocator (placement, events of earlier frees, new segments). */
  readonly stowageAllocate: number[];
  /** Each free of the Stowage allocator (the deleter of its pointer). */
  readonly stowageFree: number[];
  /** Each `BufferManager#acquireBuffer` (a free-list pop, or createBuffer). */
  readonly tfjsAcquire: number[];
  /** Each queuing of a freed buffer until the next submit. */
  readonly tfjsFree: number[];
  /**
   * Each buffer's share of the `BufferManager#releaseBuffer` calls after a submit (the time of releasing the
   * buffers queued before it, over their count, once per buffer).
   */
  readonly tfjsReleaseAtSubmit: number[];
}

/** Where each sample list of `samples` stood: the start of a slice. */
export type SampleMark = Readonly<Record<keyof AllocatorSamples, number>>;

export function markOf(samples: AllocatorSamples): SampleMark {
  return {
    stowageAllocate: samples.stowageAllocate.length,
    stowageFree: samples.stowageFree.length,
    tfjsAcquire: samples.tfjsAcquire.length,
    tfjsFree: samples.tfjsFree.length,
    tfjsReleaseAtSubmit: samples.tfjsReleaseAtSubmit.length,
  };
}

/** The samples taken from `from` to `to`. */
export function slice(samples: AllocatorSamples, from: SampleMark, to: SampleMark): AllocatorSamples {
  return {
    stowageAllocate: samples.stowageAllocate.slice(from.stowageAllocate, to.stowageAllocate),
    stowageFree: samples.stowageFree.slice(from.stowageFree, to.stowageFree),
    tfjsAcquire: samples.tfjsAcquire.slice(from.tfjsAcquire, to.tfjsAcquire),
    tfjsFree: samples.tfjsFree.slice(from.tfjsFree, to.tfjsFree),
    tfjsReleaseAtSubmit: samples.tfjsReleaseAtSubmit.slice(from.tfjsReleaseAtSubmit, to.tfjsReleaseAtSubmit),
  };
}

/** What the shadow keeps per pointer: the upstream's deleter and context it displaced, and the shadow's buffer. */
interface Shadowed {
  readonly deleter: Deleter | null;
  readonly context: unknown;
  readonly buffer: GPUBuffer | null;
}

/**
 * Note [Shadow allocations]: to compare the per-operation cost of two allocators on a real workload, both must see
 * the same requests at the same moments, with the same program around them (its kernels, its garbage, the JIT's
 * state). This adaptor sits over the runtime's WebGPU allocator: every allocation the training loop makes is also
 * made, the same size and at the same moment, in TensorFlow.js's `BufferManager` on the same device, and every free
 * is also queued there and released after the next `queue.submit`, as tfjs's backend releases a tensor bound since
 * the last submit (Note [tfjs release at submit] in allocator-webgpu's bench/TfjsReplayAllocator.ts). Only the
 * Stowage side's memory is used by the kernels; the shadow's buffers are real but idle. The clock is read around
 * each allocator's own call alone; which of the two goes first alternates, so neither always finds the caches warm
 * from the other. Stowage's `allocate` includes the completion of earlier frees' submit epochs (the engine does it
 * there); tfjs's release at submit is timed in a `queue.submit` wrapper.
 */
export class ShadowedAllocator extends ForwardingAllocator {
  readonly samples: AllocatorSamples = { stowageAllocate: [], stowageFree: [], tfjsAcquire: [], tfjsFree: [], tfjsReleaseAtSubmit: [] };
  readonly #manager: BufferManager;
  readonly #queue: GPUQueue;
  readonly #submit: GPUQueue['submit'];
  readonly #wrappedSubmit: GPUQueue['submit'];
  /** Shadow buffers freed since the last submit. */
  #pending: GPUBuffer[] = [];
  #peakTfjsAllocatedBytes = 0;
  #peakTfjsUsedBytes = 0;

  readonly #deleter: Deleter = (context) => {
    const shadowed = context as Shadowed;
    const stowageFirst = this.samples.stowageFree.length % 2 === 0;
    if (!stowageFirst) this.#shadowFree(shadowed.buffer);
    const t = performance.now();
    shadowed.deleter?.(shadowed.context);
    this.samples.stowageFree.push((performance.now() - t) * 1e6);
    if (stowageFirst) this.#shadowFree(shadowed.buffer);
  };

  constructor(upstream: Allocator, gpu: GPUDevice) {
    super(upstream);
    this.#manager = new BufferManager(gpu);
    this.#queue = gpu.queue;
    this.#submit = gpu.queue.submit;
    const submit = this.#submit;
    this.#wrappedSubmit = (commandBuffers) => {
      submit.call(this.#queue, commandBuffers);
      this.#releasePending();
    };
    this.#queue.submit = this.#wrappedSubmit;
  }

  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    const stowageFirst = this.samples.stowageAllocate.length % 2 === 0;
    const buffer = stowageFirst ? null : this.#shadowAcquire(nbytes);
    const t = performance.now();
    const ptr = this.upstream.allocate(nbytes, options);
    this.samples.stowageAllocate.push((performance.now() - t) * 1e6);
    const shadowed: Shadowed = { deleter: ptr.deleter, context: ptr.context, buffer: stowageFirst ? this.#shadowAcquire(nbytes) : buffer };
    ptr.compareExchangeDeleter(shadowed.deleter, this.#deleter, shadowed);
    return ptr;
  }

  /** The most bytes tfjs's manager had created (it destroys none before `dispose`), and had handed out, at once. */
  get tfjsPeaks(): { readonly allocatedBytes: number; readonly usedBytes: number } {
    return { allocatedBytes: this.#peakTfjsAllocatedBytes, usedBytes: this.#peakTfjsUsedBytes };
  }

  /** GPUBuffers tfjs's manager created: every buffer it holds, used or free (it destroys none before `dispose`). */
  get tfjsCreatedBuffers(): number {
    return this.#manager.getNumUsedBuffers() + this.#manager.getNumFreeBuffers();
  }

  override dispose(): void {
    if (this.#queue.submit === this.#wrappedSubmit) this.#queue.submit = this.#submit;
    this.#pending = [];
    this.#manager.dispose();
    super.dispose();
  }

  #shadowAcquire(nbytes: number): GPUBuffer | null {
    if (nbytes === 0) return null; // tfjs makes no buffer for an empty tensor
    const t = performance.now();
    const buffer = this.#manager.acquireBuffer(nbytes, TENSOR_USAGE);
    this.samples.tfjsAcquire.push((performance.now() - t) * 1e6);
    this.#peakTfjsAllocatedBytes = Math.max(this.#peakTfjsAllocatedBytes, this.#manager.numBytesAllocated);
    this.#peakTfjsUsedBytes = Math.max(this.#peakTfjsUsedBytes, this.#manager.numBytesUsed);
    return buffer;
  }

  #shadowFree(buffer: GPUBuffer | null): void {
    if (buffer === null) return;
    const t = performance.now();
    this.#pending.push(buffer);
    this.samples.tfjsFree.push((performance.now() - t) * 1e6);
  }

  #releasePending(): void {
    if (this.#pending.length === 0) return;
    const t = performance.now();
    const pending = this.#pending;
    this.#pending = [];
    for (const buffer of pending) this.#manager.releaseBuffer(buffer);
    const share = ((performance.now() - t) * 1e6) / pending.length;
    for (let i = 0; i < pending.length; i++) this.samples.tfjsReleaseAtSubmit.push(share);
  }
}
