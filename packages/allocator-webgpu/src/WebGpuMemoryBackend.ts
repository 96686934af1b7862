import type { Device, MemoryBackend, AllocateOptions } from '@stowage/core';
import type { BackendEvent, MemoryBlock, SegmentOptions, StreamId } from '@stowage/core/plugin-kit';
import { DeviceError, DeviceMismatchError, formatBytes, InvalidArgumentError } from '@stowage/core';
import { ByteCopyKernel } from './ByteCopyKernel.js';
import { roundedBufferSize, StagingPool } from './StagingPool.js';
import { SubmitCounter } from './SubmitCounter.js';
import { SubmitEpochs } from './SubmitEpochs.js';
import { WebGpuPager } from './WebGpuPager.js';
import { DeviceBudget } from './DeviceBudget.js';
import { BufferUsage, KIND_FLAGS, kindOfUsage } from './WebGpuUsage.js';

export interface WebGpuMemoryBackendOptions {
  readonly device: GPUDevice;
  /** Ordinal of this device among the runtime's WebGPU devices. Default 0. */
  readonly index?: number;
  /**
   * What the device can hold, when a caller knows (tests use it to run the device out of memory). WebGPU reports
   * neither total nor free memory, so by default it is unknown; the allocator's budget is the engine's
   * `memoryLimit` (the plugin's `limit`), not this.
   */
  readonly capacityBytes?: number;
  /** Overrides the device's maxBufferSize (tests use it to make the device reject a segment). */
  readonly maxBufferSize?: number;
  /**
   * Creates every segment mapped, so that a refusal is a RangeError at once (Note [The device says no]). Default
   * false: a refusal is learnt from the error scope.
   */
  readonly mappedSegments?: boolean;
  /**
   * The device's one budget in bytes (the plugin's `limit`): segments, staging and scratch buffers together stay
   * within it (Note [One budget]). Default: none (only the engine's `memoryLimit` bounds segments).
   */
  readonly budgetBytes?: number;
  /**
   * Bytes of the budget kept for LMS page-out staging while a residency service pages this device
   * (`pager.enablePaging()`): segments then stay within `budgetBytes - pagingReserveBytes` (Note [One budget]).
   * Default 0.
   */
  readonly pagingReserveBytes?: number;
  /** Keeps alive objects the device depends on (the `webgpu` package's GPU object must outlive its devices). */
  readonly keepAlive?: unknown;
  /** Called when the device rejected a segment it created (out-of-memory or validation error scope). */
  readonly onSegmentFailed?: (buffer: GPUBuffer, error: DeviceError) => void;
  /** Called once when the device is lost. */
  readonly onLost?: (error: DeviceError) => void;
}

/** A page-out's read through a staging buffer (`pageOutRead`). */
export interface StagedRead {
  /** Resolves with the bytes once the staging buffer mapped; rejects when the copy failed or was cancelled. */
  readonly bytes: Promise<Uint8Array>;
  /** Destroys the staging buffer now, unless the bytes were copied out already; `bytes` then rejects. */
  cancel(): void;
}

/** Where a read through a staging buffer stands: cancelled (its buffer destroyed) or settled (buffer given back). */
interface ReadState {
  cancelled: boolean;
  settled: boolean;
}

/**
 * WebGPU as a MemoryBackend: segments are GPUBuffers of one usage class each (storage, uniform), blocks are
 * (buffer, offset) ranges aligned to minStorageBufferOffsetAlignment, one stream (the device's queue).
 *
 * Frees wait for their submit (Note [Submit epochs] in SubmitEpochs.ts).
 *
 * Invariants: reservedBytes == sum of live segment sizes; reservedBytes <= capacityBytes when one was given
 * (malloc returns null past it); `budget` holds what Note [One budget] (DeviceBudget.ts) bounds.
 */
export class WebGpuMemoryBackend implements MemoryBackend<GPUBuffer> {
  readonly device: Device;
  readonly alignment: number;
  readonly capacityBytes: number | undefined;
  readonly defaultStream: StreamId = 0;
  readonly deferredFree = true;
  readonly gpuDevice: GPUDevice;
  readonly maxBufferSize: number;
  readonly maxStorageBufferBindingSize: number;
  readonly keepAlive: unknown;
  /** Pages blocks out to host memory and back, for LMS. */
  readonly pager: WebGpuPager = new WebGpuPager(this);
  readonly #submit: (buffers: Iterable<GPUCommandBuffer>) => undefined;
  readonly #readback: StagingPool;
  readonly #kernel: ByteCopyKernel;
  readonly #options: WebGpuMemoryBackendOptions;
  #scratch: GPUBuffer | undefined;
  /** Copies recorded but not yet submitted (Note [Batched copies]). */
  #pending: GPUCommandEncoder | null = null;
  readonly #flushPending = (): void => {
    if (this.#pending === null) return;
    const encoder = this.#pending;
    this.#pending = null;
    this.#submit([encoder.finish()]);
  };
  readonly #epochs: SubmitCounter;
  /** The events of deferred frees (Note [Submit epochs]). */
  readonly #events: SubmitEpochs;
  /**
   * Segment addresses (names for snapshots and ordering; never reused) start above 2^31, so they are never V8
   * small integers. Starting lower, they crossed 2^30 after about 800 MiB of segments had been made, and every
   * engine function and object shape compiled for small-integer addresses was thrown away at once (`--trace-deopt`:
   * 'not a Smi', 'overflow' and 'wrong map' in eight functions, in a replay that kept making segments).
   */
  #nextAddress = 2 ** 32;
  /** Segments the device refused at once so far (Note [The device says no]). */
  refusedSegments = 0;
  #reservedBytes = 0;
  /** What the device's one budget allows now: segments, staging, scratch (Note [One budget] in DeviceBudget.ts). */
  readonly budget: DeviceBudget;
  #ceiling = Number.POSITIVE_INFINITY;
  #createdBuffers = 0;
  #lost: DeviceError | undefined;
  #disposed = false;
  /**
   * The GPUDevice of every buffer pointers may name (segments and imported buffers), shared by every backend: a
   * pointer whose buffer is recorded under another device belongs to that device. Keyed weakly by the buffer:
   * device state, not a runtime's (as SubmitCounter's per queue).
   */
  static readonly #deviceOf = new WeakMap<GPUBuffer, GPUDevice>();

  constructor(options: WebGpuMemoryBackendOptions) {
    const gpu = options.device;
    this.#options = options;
    this.gpuDevice = gpu;
    this.device = Object.freeze({ type: 'webgpu', index: options.index ?? 0 });
    this.alignment = Math.max(gpu.limits.minStorageBufferOffsetAlignment, gpu.limits.minUniformBufferOffsetAlignment);
    this.capacityBytes = options.capacityBytes;
    this.maxBufferSize = options.maxBufferSize ?? gpu.limits.maxBufferSize;
    this.maxStorageBufferBindingSize = gpu.limits.maxStorageBufferBindingSize;
    this.keepAlive = options.keepAlive;
    this.#epochs = SubmitCounter.acquire(gpu.queue);
    this.#epochs.addBeforeSubmit(this.#flushPending);
    this.#events = new SubmitEpochs(this.#epochs);
    const submit = this.#epochs.submitUncounted;
    this.#submit = submit;
    this.#readback = new StagingPool(gpu, 64 << 20, this.maxBufferSize);
    this.#kernel = new ByteCopyKernel(gpu, gpu.limits.minStorageBufferOffsetAlignment, submit);
    this.budget = new DeviceBudget({
      budgetBytes: options.budgetBytes,
      pagingReserveBytes: options.pagingReserveBytes,
      staging: this.#readback,
      reservedBytes: () => this.#reservedBytes,
      scratchBytes: () => this.#scratch?.size ?? 0,
      dropScratch: () => this.#dropScratch(),
    });
    void gpu.lost.then((info) => {
      if (this.#disposed) return;
      this.#lost = new DeviceError(`The WebGPU device was lost (${info.reason}): ${info.message.replace(/[.\s]+$/, '') || 'no message'}. Its memory is gone; create a new device.`);
      options.onLost?.(this.#lost);
    });
  }

  /** Set once the device is lost; every operation then throws it. */
  get lostError(): DeviceError | undefined {
    return this.#lost;
  }

  get reservedBytes(): number {
    return this.#reservedBytes;
  }

  /** `createBuffer` calls for segments so far (staging and scratch buffers not counted). */
  get createdBuffers(): number {
    return this.#createdBuffers;
  }

  /** `queue.submit` calls seen (the submit epoch). */
  get submitCount(): number {
    return this.#epochs.count;
  }

  /** @throws InvalidArgumentError for `shared: true` (GPU memory is never host shared memory) or an unknown usage */
  segmentKind(options: AllocateOptions): number {
    if (options.shared !== undefined && options.shared !== false) {
      throw new InvalidArgumentError('options.shared', options.shared, 'false or nothing on webgpu: GPU memory cannot be host shared memory (allocate on cpu with { shared: true } to cross threads)');
    }
    return kindOfUsage(options.usage);
  }

  /**
   * Note [The device says no]: a real GPU may run out before the allocator's budget (other programs, a browser's
   * own limits). A refusal must reach the engine's out-of-memory chain (release the cache, reclaim LMS storages,
   * retry), and must never lose the device: nothing here destroys it. WebGPU reports a refused `createBuffer` only
   * asynchronously, in an out-of-memory error scope; only a buffer created with `mappedAtCreation` that cannot be
   * backed fails at once, with a RangeError. Two ways, chosen by `mappedSegments` (the plugin's `segmentRefusal`):
   * - by default the refusal is learnt from the scope, after the allocation that made the segment returned: the
   *   segment is retired (its pointers reported in a `deviceError`, nothing more placed in it) and
   *   `deviceCeilingBytes` drops to what was reserved before it, so that `malloc` answers "no room" past that point
   *   at once and later allocations run the chain instead of meeting the refusal again. The ceiling lasts until a
   *   segment goes back to the device or `emptyCache()` runs (the refusal may have been passing: another program's
   *   memory): then the device is asked again;
   * - with `mappedSegments`, every segment is created mapped (and unmapped at once), a RangeError makes `malloc`
   *   return null, and the chain runs before anything is placed in the refused segment. Creating a segment mapped
   *   costs about twice as much, which is why it is not
   *   the default: the allocator's cold pass pays it for every segment (the package README has the figures).
   */
  malloc(byteLength: number, options: SegmentOptions = {}): MemoryBlock<GPUBuffer> | null {
    this.#checkUsable();
    if (byteLength > this.maxBufferSize) return null;
    if (this.capacityBytes !== undefined && this.#reservedBytes + byteLength > this.capacityBytes) return null;
    if (this.#reservedBytes + byteLength > this.#ceiling) return null;
    if (!this.budget.segmentFits(byteLength)) return null;
    const gpu = this.gpuDevice;
    const usage = KIND_FLAGS[options.kind ?? 0];
    if (usage === undefined) throw new InvalidArgumentError('options.kind', options.kind, `a segment kind of this backend (0 to ${KIND_FLAGS.length - 1})`);
    const reservedBefore = this.#reservedBytes;
    gpu.pushErrorScope('out-of-memory');
    gpu.pushErrorScope('validation');
    let buffer: GPUBuffer | undefined;
    try {
      const mapped = this.#options.mappedSegments === true;
      buffer = gpu.createBuffer({ size: byteLength, usage, mappedAtCreation: mapped, label: `stowage segment ${formatBytes(byteLength)}` });
      if (mapped) buffer.unmap();
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      this.refusedSegments++; // the device said no at once (Note [The device says no]): the chain runs
      buffer = undefined;
    } finally {
      // Popped on every path: a scope left pushed would swallow the program's own errors.
      const made = buffer;
      const report = (error: GPUError | null, outOfMemory: boolean): void => {
        if (error === null || this.#disposed || made === undefined) return;
        if (outOfMemory) this.#ceiling = Math.min(this.#ceiling, reservedBefore);
        this.#options.onSegmentFailed?.(made, new DeviceError(`The WebGPU device rejected a ${formatBytes(byteLength)} segment: ${error.message}`));
      };
      void gpu.popErrorScope().then((error) => report(error, false), () => {});
      void gpu.popErrorScope().then((error) => report(error, true), () => {});
    }
    if (buffer === undefined) return null;
    WebGpuMemoryBackend.#deviceOf.set(buffer, this.gpuDevice);
    this.#createdBuffers++;
    this.#reservedBytes += byteLength;
    this.budget.noteDeviceBytes();
    return { handle: buffer, byteOffset: 0, address: this.takeAddress(byteLength), byteLength };
  }

  /**
   * Reserved bytes past which `malloc` answers no room at once: unlimited until the device refuses a segment
   * asynchronously, then what was reserved before that segment (Note [The device says no]).
   */
  get deviceCeilingBytes(): number {
    return this.#ceiling;
  }

  free(segment: MemoryBlock<GPUBuffer>): void {
    this.#flushPending(); // a recorded copy may name the buffer
    this.#reservedBytes -= segment.byteLength;
    this.#ceiling = Number.POSITIVE_INFINITY; // memory went back: the device may take a segment again
    segment.handle.destroy();
    // destroy() frees nothing until the queue moves on: an empty submit (no epoch) gets it going; flush() waits.
    if (!this.#lost) this.#submit([]);
  }

  /**
   * Records a caller's buffer (importBuffer) as one of this device's, for `isDeviceBuffer`.
   * @throws DeviceMismatchError for a buffer recorded under another GPUDevice (another allocator's segment or import)
   */
  adoptBuffer(buffer: GPUBuffer): void {
    const owner = WebGpuMemoryBackend.#deviceOf.get(buffer);
    if (owner !== undefined && owner !== this.gpuDevice) {
      throw new DeviceMismatchError('The buffer belongs to another GPUDevice (a segment or import of another allocator); this device cannot use it. Copy through the host (readBytes, then writeBytes).');
    }
    WebGpuMemoryBackend.#deviceOf.set(buffer, this.gpuDevice);
  }

  /**
   * True when `buffer` is a segment or an imported buffer of this backend's GPUDevice (by any backend on it);
   * false for a buffer of another GPUDevice, which this device cannot use.
   */
  isDeviceBuffer(buffer: GPUBuffer): boolean {
    return WebGpuMemoryBackend.#deviceOf.get(buffer) === this.gpuDevice;
  }

  /** A fresh range of the virtual address space Stowage gives GPUBuffers (for snapshots and imported buffers). */
  takeAddress(byteLength: number): number {
    const address = this.#nextAddress;
    this.#nextAddress += Math.ceil(Math.max(byteLength, 1) / this.alignment) * this.alignment;
    return address;
  }

  copy(dst: GPUBuffer, dstOffset: number, src: GPUBuffer, srcOffset: number, byteLength: number): void {
    this.#checkUsable();
    if (src === dst) {
      // copyBufferToBuffer and storage bindings cannot alias one buffer: go through the scratch buffer.
      const start = Math.floor(srcOffset / 4) * 4;
      const length = Math.ceil((srcOffset + byteLength) / 4) * 4 - start;
      const scratch = this.#scratchOf(length);
      this.#copyAligned(scratch, 0, src, start, length);
      this.copy(dst, dstOffset, scratch, srcOffset - start, byteLength);
      return;
    }
    if (dstOffset % 4 === 0 && srcOffset % 4 === 0 && byteLength % 4 === 0) this.#copyAligned(dst, dstOffset, src, srcOffset, byteLength);
    else {
      this.#flushPending();
      this.#kernel.copy(dst, dstOffset, src, srcOffset, byteLength);
    }
  }

  write(dst: GPUBuffer, dstOffset: number, bytes: Uint8Array): void {
    this.#checkUsable();
    this.#flushPending(); // writeBuffer runs on the queue at once: earlier copies must be submitted first
    if (dstOffset % 4 === 0 && bytes.byteLength % 4 === 0) {
      // Dawn for Node crashes the process on SharedArrayBuffer-backed data (cpu storages with `shared`, IPC's
      // shared memory): such bytes are copied into a plain array first.
      this.gpuDevice.queue.writeBuffer(dst, dstOffset, isShared(bytes) ? bytes.slice() : bytes);
      return;
    }
    const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
    padded.set(bytes);
    const scratch = this.#scratchOf(padded.byteLength);
    this.gpuDevice.queue.writeBuffer(scratch, 0, padded);
    this.#kernel.copy(dst, dstOffset, scratch, 0, bytes.byteLength);
  }

  /**
   * Copies bytes to the host through a staging buffer; the copy is recorded and submitted before this returns its
   * promise. Within the budget when the room is there; otherwise beyond it, counted (Note [One budget]).
   */
  async read(src: GPUBuffer, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    this.#checkUsable();
    const length = alignedLength(srcOffset, byteLength);
    if (!this.budget.stagingFits(length)) this.budget.countReadOverBudget();
    return this.#readThrough(this.#takeStaging(length), src, srcOffset, byteLength);
  }

  /**
   * As `read`, for an LMS page-out: null (nothing recorded) when the staging buffer would pass the budget even
   * after the pool was given back (Note [One budget]). `cancel()` destroys the staging buffer of a page-out whose
   * bytes are no longer wanted, giving its room back at once.
   */
  pageOutRead(src: GPUBuffer, srcOffset: number, byteLength: number): StagedRead | null {
    if (this.#lost) return { bytes: Promise.reject(this.#lost), cancel: () => {} }; // the page-out's caller sees it on `done`
    const length = alignedLength(srcOffset, byteLength);
    if (!this.budget.stagingFits(length)) return null;
    const staging = this.#takeStaging(length);
    const state: ReadState = { cancelled: false, settled: false };
    return {
      bytes: this.#readThrough(staging, src, srcOffset, byteLength, state),
      cancel: () => {
        if (state.cancelled || state.settled) return;
        state.cancelled = true;
        this.#readback.discard(staging); // a pending mapAsync rejects; the queue's copy into it still runs
      },
    };
  }

  /**
   * Records the copy of `src`'s words into `staging` and submits it at once; resolves with the bytes once mapped.
   * `state.cancelled`: the staging buffer was destroyed meanwhile (rejects, touching nothing).
   */
  async #readThrough(staging: GPUBuffer, src: GPUBuffer, srcOffset: number, byteLength: number, state: ReadState = { cancelled: false, settled: false }): Promise<Uint8Array> {
    const start = Math.floor(srcOffset / 4) * 4;
    const length = alignedLength(srcOffset, byteLength);
    // A copy the device rejects (a buffer the caller destroyed, say) must not hand back what the staging buffer
    // held before: the copy and its submit run in a validation scope, checked before the bytes are trusted.
    // Copies batched before this read are submitted first, outside the scope: their errors are not this read's.
    this.#flushPending();
    const gpu = this.gpuDevice;
    gpu.pushErrorScope('validation');
    this.#copyAligned(staging, 0, src, start, length);
    this.#flushPending();
    const rejected = gpu.popErrorScope();
    let failure: unknown;
    try {
      await staging.mapAsync(1 /* GPUMapMode.READ */, 0, length);
      const error = await rejected;
      if (error !== null) failure = new Error(error.message);
    } catch (error) {
      failure = error;
    }
    if (state.cancelled) throw new DeviceError(`The page-out of ${formatBytes(byteLength)} was cancelled: its bytes were no longer wanted.`);
    state.settled = true;
    if (failure !== undefined) {
      if (staging.mapState === 'mapped') staging.unmap();
      this.#readback.discard(staging); // never pooled again
      this.#checkUsable();
      throw new DeviceError(`Reading ${formatBytes(byteLength)} back from the WebGPU device failed: ${(failure as Error).message}`, { cause: failure });
    }
    const out = new Uint8Array(staging.getMappedRange(0, length), srcOffset - start, byteLength).slice();
    staging.unmap();
    if (this.#disposed) this.#readback.discard(staging); // the pool went away while this read was in flight
    else this.#readback.give(staging);
    return out;
  }

  isStream(stream: StreamId): boolean {
    return stream === 0;
  }

  /** Frees inside `release` reuse their blocks at once (Note [Frees after their submit] in SubmitEpochs.ts). */
  freeingSubmitted<T>(release: () => T): T {
    return this.#events.freeingSubmitted(release);
  }

  recordEvent(stream: StreamId): BackendEvent {
    return this.#events.record(stream);
  }

  isEventComplete(event: BackendEvent): boolean {
    return this.#events.isComplete(event);
  }

  synchronizeEvent(event: BackendEvent): void {
    this.#events.synchronize(event);
  }

  outOfMemoryHint(requestedBytes: number): string | undefined {
    if (requestedBytes <= this.maxBufferSize) return this.budget.outOfMemoryHint();
    return `A WebGPU buffer on this device holds at most ${formatBytes(this.maxBufferSize)} (maxBufferSize), so no request larger than that can be served; split the tensor.`;
  }

  /**
   * Destroys the buffers host transfers keep between calls (the scratch buffer of unaligned writes and
   * same-buffer copies, the pooled readback buffers): they live outside the segments and the budget.
   */
  releaseTransferBuffers(): void {
    this.#ceiling = Number.POSITIVE_INFINITY; // emptyCache: try the device again (Note [The device says no])
    this.#dropScratch();
    this.#readback.clear();
  }

  /** Submits nothing and waits until the queue is idle: destroyed segments are then really freed. */
  async flush(): Promise<void> {
    if (this.#lost || this.#disposed) return;
    this.#flushPending();
    this.#submit([]);
    await this.gpuDevice.queue.onSubmittedWorkDone();
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#flushPending();
    this.#epochs.removeBeforeSubmit(this.#flushPending);
    this.#epochs.release();
    this.#readback.dispose();
    this.#kernel.dispose();
    this.#scratch?.destroy();
  }

  /**
   * Note [Batched copies]: aligned copies are recorded into one pending encoder and submitted together: before
   * anything that runs on the queue at once (writeBuffer, the byte-copy kernel, a read, a free, any
   * `queue.submit` by the program, through SubmitCounter), and at the end of the current task at the latest. A
   * strided tensor copy of thousands of runs is then one submit, in order with everything else.
   */
  #copyAligned(dst: GPUBuffer, dstOffset: number, src: GPUBuffer, srcOffset: number, byteLength: number): void {
    if (this.#pending === null) {
      this.#pending = this.gpuDevice.createCommandEncoder({ label: 'stowage copies' });
      queueMicrotask(this.#flushPending);
    }
    this.#pending.copyBufferToBuffer(src, srcOffset, dst, dstOffset, byteLength);
  }

  /** The scratch buffer, grown to at least `bytes` (a power of two). Safe to reuse: every use is submitted in order. */
  #scratchOf(bytes: number): GPUBuffer {
    if (!this.#scratch || this.#scratch.size < bytes) {
      this.#flushPending(); // recorded copies may name the old scratch buffer
      this.#scratch?.destroy();
      const size = roundedBufferSize(bytes, 4096, this.maxBufferSize);
      this.#scratch = this.gpuDevice.createBuffer({ size, usage: BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, label: 'stowage scratch' });
      this.budget.noteDeviceBytes();
    }
    return this.#scratch;
  }

  /** Destroys the scratch buffer (the budget needs its room); the next unaligned transfer makes it again. */
  #dropScratch(): void {
    if (this.#scratch === undefined) return;
    this.#flushPending(); // a recorded copy may name the scratch buffer; submitted work keeps it until done
    this.#scratch.destroy();
    this.#scratch = undefined;
  }

  #takeStaging(length: number): GPUBuffer {
    const staging = this.#readback.take(length);
    this.budget.noteDeviceBytes();
    return staging;
  }

  #checkUsable(): void {
    if (this.#lost) throw this.#lost;
  }
}

/** Whole 4-byte words covering `[srcOffset, srcOffset + byteLength)`: what a copy moves. */
function alignedLength(srcOffset: number, byteLength: number): number {
  return Math.ceil((srcOffset + byteLength) / 4) * 4 - Math.floor(srcOffset / 4) * 4;
}

function isShared(bytes: Uint8Array): boolean {
  return typeof SharedArrayBuffer !== 'undefined' && bytes.buffer instanceof SharedArrayBuffer;
}
