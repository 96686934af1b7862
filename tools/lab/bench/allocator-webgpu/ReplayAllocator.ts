import type { WebGpuContext } from '@stowage/allocator-webgpu';

/**
 * What the WebGPU replay bench drives: one allocation strategy over one GPUDevice, reduced to the calls a tensor
 * program makes. Handles are opaque to the replay; each allocator gives back what it handed out.
 */
export interface ReplayAllocator<H = unknown> {
  /** The allocator's name in the bench's output. */
  readonly name: string;
  /** A buffer (range) of at least `bytes` bytes, a multiple of 4. Throws what the allocator throws. */
  allocate(bytes: number): H;
  /** Gives `handle` back; it may be reused only after the next `submit()` (the work recorded so far may read it). */
  free(handle: H): void;
  /** What a program does when it submits its recorded work: `queue.submit`, then whatever the allocator ties to it. */
  submit(): void;
  /** Bytes of GPUBuffers this allocator holds now (live and cached, not yet destroyed). */
  readonly reservedBytes: number;
  /** Peak of `reservedBytes` since creation or the last `resetPeak()`. */
  readonly peakReservedBytes: number;
  /** `device.createBuffer` calls this allocator made since it was created. */
  readonly createBufferCalls: number;
  /** Starts a new peak of `reservedBytes` at its current value. */
  resetPeak(): void;
  /** Destroys every buffer the allocator holds and undoes what it changed on the device. Idempotent. */
  dispose(): void;
}

/** An allocator kind: its name and how to build one over an open device. */
export interface ReplayAllocatorKind {
  readonly name: string;
  /** Replayed further for a 'steady' line (allocators that cache; raw createBuffer per allocation is too slow). */
  readonly steady?: boolean;
  create(context: WebGpuContext): ReplayAllocator;
}

/** GPUBufferUsage STORAGE | COPY_SRC | COPY_DST (spec values): the usage of a tensor buffer in tfjs and here. */
export const TENSOR_USAGE = 0x0080 | 0x0004 | 0x0008;
