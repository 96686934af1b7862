import type { Device, MemoryBackend, AllocateOptions } from '@stowage/core';
import type { BackendEvent, MemoryBlock, SegmentOptions, StreamId } from '@stowage/core/plugin-kit';
import { DeviceError, DeviceMismatchError, formatBytes, InvalidArgumentError } from '@stowage/core';
import { ByteCopyKernel } from './ByteCopyKernel.js';
import { roundedBufferSize, StagingPool } from './StagingPool.js';
import { SubmitCounter } from './SubmitCounter.js';
import { WebGpuPager } from './WebGpuPager.js';
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

/** Bytes of the byte-copy kernel's params buffer, made with the backend and alive until it is disposed. */
const KERNEL_PARAMS_BYTES = 16;

/** The figures of Note [One budget], merged into the allocator's `memoryStats()` (the package README lists them). */
export interface WebGpuDeviceStats {
  /** Segments plus transfer buffers: every byte Stowage holds on the device (the budget bounds it). */
  readonly 'device_bytes.current': number;
  readonly 'device_bytes.peak': number;
  /** Readback (MAP_READ) staging buffers alive: page-outs and host reads in flight, and pooled ones. */
  readonly 'staging_bytes.current': number;
  readonly 'staging_bytes.peak': number;
  /** Of staging_bytes.current, the idle pooled buffers, given back to the device when the budget needs room. */
  readonly 'staging_bytes.pooled': number;
  /** Staging, scratch and kernel-params buffers: what the device holds outside segments. */
  readonly 'transfer_bytes.current': number;
  /** The device's budget (-1 when it has none). */
  readonly budget_bytes: number;
  /** Bytes of the budget kept for page-out staging now (0 until LMS pages the device). */
  readonly paging_reserve_bytes: number;
  /** Host reads that found no room in the budget and read through staging beyond it (Note [One budget]). */
  readonly reads_over_budget: number;
}

interface EpochEvent extends BackendEvent {
  /** The submit count when the free was recorded: complete once a submit moved past it. */
  readonly epoch: number;
  /** The synchronizations before it: complete once another one forced it (synchronizeEvent). */
  readonly generation: number;
}

/**
 * WebGPU as a MemoryBackend: segments are GPUBuffers of one usage class each (storage, uniform), blocks are
 * (buffer, offset) ranges aligned to minStorageBufferOffsetAlignment, one stream (the device's queue).
 *
 * Note [Submit epochs]: a tensor program records command encoders and submits them later. A block freed between
 * recording and submitting may still be read by that work, while `queue.writeBuffer` for its next owner would
 * run at once on the queue timeline, before the encoder. So frees are deferred (`deferredFree`): the event a
 * free records is the current submit count, and it completes at the next `queue.submit` by anyone. The
 * backend counts submits by wrapping `device.queue.submit` once per queue (SubmitCounter; removed when the last backend is disposed); its own transfers submit
 * through the unwrapped function and start no epoch. `synchronizeEvent` (emptyCache, the out-of-memory path)
 * completes the events this backend recorded so far without a submit: work recorded before it and submitted
 * after it is the caller's risk under memory pressure. A free after it waits for the next submit as usual (each
 * event carries the number of synchronizations before it). Other backends on the queue are not affected.
 *
 * Note [Frees after their submit]: a program that itself holds a release until the submit that used the block
 * (TensorFlow.js's WebGPU backend frees a tensor's memory only after `queue.submit` of the last command buffer
 * that bound it, or at once when nothing recorded since the last submit bound it) would otherwise wait twice: its
 * free, made right after that submit, waits for the next one. `freeingSubmitted(release)` records the frees made
 * inside `release` with the previous epoch's event, which is complete: the next allocation may reuse the block.
 * That is the caller's promise that no unsubmitted encoder names the block; a `queue.writeBuffer` for its next
 * owner then runs after every command buffer that used it.
 *
 * Note [One budget]: the device's budget B (the plugin's `limit`) bounds every buffer Stowage creates on it:
 * segments, the readback staging of host reads and LMS page-outs (in flight or pooled), the scratch buffer and
 * the byte-copy kernel's params (16 bytes made with the backend: counted, but left out of the checks below). The engine bounds its segments by its `memoryLimit` (B); this backend bounds the
 * sum, so the engine needs to know nothing of staging:
 * - `malloc` has room for a segment of n bytes only while reserved + n + max(transfer, reserve) <= B, where
 *   transfer is every byte outside segments and reserve is the part of B kept for page-out staging while LMS pages
 *   this device (`pagingReserveBytes`, 0 without LMS). It first gives pooled staging and the scratch buffer back
 *   to the device when that makes room; otherwise it answers "no room" and the engine runs its out-of-memory chain
 *   (release the cache, reclaim LMS storages, retry) as for the engine's own limit.
 * - A page-out (`pageOutRead`) must hold its bytes on the device, in a staging buffer, until `mapAsync` resolves:
 *   reclaiming a storage whose bytes are not yet on the host gains nothing until then. Its staging buffer is made
 *   only when reserved + transfer + its size <= B (after giving pooled staging back); otherwise the page-out is
 *   refused (null; LMS counts `page_out_refused`) and LMS reclaims another storage instead: one whose host copy exists
 *   copies nothing and needs no staging. The reserve is what keeps page-outs possible when segments fill their
 *   share, and bounds the bytes of page-outs in flight. Once mapped and copied out, a staging buffer is pooled
 *   (within the budget, up to 64 MiB, given back on demand) or destroyed. A page-out whose bytes nobody wants any
 *   more (LMS released or rewrote the storage) is cancelled: its staging buffer is destroyed and uncounted at once.
 * - A host read (`read`) records its copy at once, as every transfer does, so it cannot wait for room: when its
 *   staging does not fit after the pool was given back, it reads beyond the budget and counts
 *   `reads_over_budget` (under LMS, `runtime.read` of a reclaimed storage reads its host copy and needs none).
 *
 * Invariants: reservedBytes == sum of live segment sizes; reservedBytes <= capacityBytes when one was given
 * (malloc returns null past it); reservedBytes + transferBytes <= budgetBytes + 16 (the kernel's params) but for host reads counted in
 * `reads_over_budget` (Note [One budget]).
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
  /** The event of the current epoch, once a free recorded it (recordEvent). */
  #lastEvent: EpochEvent | null = null;
  /** Depth of `freeingSubmitted` calls in progress: frees inside are already ordered after their last use. */
  #submittedFrees = 0;
  /** Synchronizations so far: events of earlier generations are complete though no submit ended them. */
  #synchronized = 0;
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
  /** The device's budget (Note [One budget]); infinite when none was given. */
  readonly #budgetBytes: number;
  /** Bytes kept for page-out staging once paging is enabled (Note [One budget]). */
  readonly #pagingReserveBytes: number;
  #pagingEnabled = false;
  #devicePeakBytes = 0;
  #readsOverBudget = 0;
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
    this.#budgetBytes = options.budgetBytes ?? Number.POSITIVE_INFINITY;
    this.#pagingReserveBytes = Math.max(0, Math.min(options.pagingReserveBytes ?? 0, this.#budgetBytes));
    this.#epochs = SubmitCounter.acquire(gpu.queue);
    this.#epochs.addBeforeSubmit(this.#flushPending);
    const submit = this.#epochs.submitUncounted;
    this.#submit = submit;
    this.#readback = new StagingPool(gpu, 64 << 20, this.maxBufferSize);
    this.#kernel = new ByteCopyKernel(gpu, gpu.limits.minStorageBufferOffsetAlignment, submit);
    this.#noteDeviceBytes();
    void gpu.lost.then((info) => {
      if (this.#disposed) return;
      this.#lost = new DeviceError(`The WebGPU device was lost (${info.reason}): ${info.message || 'no message'}. Its memory is gone; create a new device.`);
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

  /** Bytes Stowage holds on the device outside segments: staging (in flight and pooled), scratch, kernel params. */
  get transferBytes(): number {
    return this.#readback.liveBytes + (this.#scratch?.size ?? 0) + KERNEL_PARAMS_BYTES;
  }

  /** Segments plus transfer buffers: every byte Stowage holds on the device now (Note [One budget]). */
  get deviceBytes(): number {
    return this.#reservedBytes + this.transferBytes;
  }

  /** The device's budget; infinite when none was given. */
  get budgetBytes(): number {
    return this.#budgetBytes;
  }

  /** Bytes of the budget kept for page-out staging now: the reserve once paging is enabled, else 0. */
  get pagingReserveBytes(): number {
    return this.#pagingEnabled ? this.#pagingReserveBytes : 0;
  }

  /** From now on segments leave `pagingReserveBytes` of the budget to page-out staging (the pager's enablePaging). */
  enablePaging(): void {
    this.#pagingEnabled = true;
  }

  /**
   * Bytes a new segment may take now within the budget (Note [One budget]), counting pooled staging and the scratch
   * buffer as room (`malloc` gives them back first); infinite without a budget. The engine's own limit may be less.
   */
  get segmentHeadroomBytes(): number {
    const inFlight = this.#readback.liveBytes - this.#readback.pooledBytes;
    return this.#budgetBytes - this.#reservedBytes - Math.max(inFlight, this.pagingReserveBytes);
  }

  /** The figures of Note [One budget], for `memoryStats()`. */
  deviceStats(): WebGpuDeviceStats {
    return {
      'device_bytes.current': this.deviceBytes,
      'device_bytes.peak': this.#devicePeakBytes,
      'staging_bytes.current': this.#readback.liveBytes,
      'staging_bytes.peak': this.#readback.peakBytes,
      'staging_bytes.pooled': this.#readback.pooledBytes,
      'transfer_bytes.current': this.transferBytes,
      budget_bytes: Number.isFinite(this.#budgetBytes) ? this.#budgetBytes : -1,
      paging_reserve_bytes: this.pagingReserveBytes,
      reads_over_budget: this.#readsOverBudget,
    };
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
    if (!this.#segmentFits(byteLength)) return null;
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
    this.#noteDeviceBytes();
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
    if (!this.#stagingFits(length)) this.#readsOverBudget++;
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
    if (!this.#stagingFits(length)) return null;
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

  /**
   * Runs `release` with every free it makes treated as ordered after the last submit (Note [Frees after their
   * submit]): their blocks are reusable by the next allocation, without waiting for another submit.
   */
  freeingSubmitted<T>(release: () => T): T {
    this.#submittedFrees++;
    try {
      return release();
    } finally {
      this.#submittedFrees--;
    }
  }

  /**
   * Every free of one epoch and generation records the same event (they are immutable): no object per free.
   * Inside `freeingSubmitted` the event is the previous epoch's, complete already.
   */
  recordEvent(stream: StreamId): BackendEvent {
    const epoch = this.#submittedFrees > 0 ? this.#epochs.count - 1 : this.#epochs.count;
    const generation = this.#synchronized;
    let event = this.#lastEvent;
    if (event === null || event.epoch !== epoch || event.generation !== generation) this.#lastEvent = event = { stream, epoch, generation };
    return event;
  }

  isEventComplete(event: BackendEvent): boolean {
    const e = event as EpochEvent;
    return this.#epochs.count > e.epoch || this.#synchronized > e.generation;
  }

  /**
   * Completes `event` without a submit (emptyCache, the out-of-memory path), and with it every event this backend
   * recorded before. Only those: a free recorded afterwards, in the same submit epoch, still waits for the next
   * submit (work the program records after the synchronization may read it). Only this backend's: the submit count
   * other allocators on the queue read is not touched, so their pending frees still wait for a real submit.
   */
  synchronizeEvent(event: BackendEvent): void {
    if ((event as EpochEvent).generation === this.#synchronized) this.#synchronized++;
  }

  outOfMemoryHint(requestedBytes: number): string | undefined {
    if (requestedBytes <= this.maxBufferSize) {
      const transfer = this.transferBytes;
      if (!Number.isFinite(this.#budgetBytes) || transfer + this.pagingReserveBytes <= KERNEL_PARAMS_BYTES) return undefined;
      return `Of the ${formatBytes(this.#budgetBytes)} budget, ${formatBytes(transfer)} are staging and scratch buffers (${formatBytes(this.#readback.liveBytes - this.#readback.pooledBytes)} of page-outs and reads in flight) and ${formatBytes(this.pagingReserveBytes)} are kept for page-out staging; page-outs in flight give their room back once they land (await pinAsync, or the storages' lms.ready()).`;
    }
    return `A WebGPU buffer on this device holds at most ${formatBytes(this.maxBufferSize)} (maxBufferSize), so no request larger than that can be served; split the tensor.`;
  }

  /**
   * Destroys the buffers host transfers keep between calls (the scratch buffer of unaligned writes and
   * same-buffer copies, the pooled readback buffers): they live outside the segments and the budget.
   */
  releaseTransferBuffers(): void {
    this.#ceiling = Number.POSITIVE_INFINITY; // emptyCache: try the device again (Note [The device says no])
    this.#flushPending(); // a recorded copy may name the scratch buffer
    this.#scratch?.destroy();
    this.#scratch = undefined;
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
      this.#noteDeviceBytes();
    }
    return this.#scratch;
  }

  /**
   * True when a segment of `byteLength` bytes fits the budget beside the transfer buffers and the paging reserve
   * (Note [One budget]), after giving pooled staging and the scratch buffer back to the device if that makes room.
   */
  #segmentFits(byteLength: number): boolean {
    const fits = (): boolean => this.#reservedBytes + byteLength + Math.max(this.#budgetedTransferBytes, this.pagingReserveBytes) <= this.#budgetBytes;
    if (fits()) return true;
    this.#readback.trim(this.#reservedBytes + byteLength + this.#budgetedTransferBytes - this.#budgetBytes);
    if (fits()) return true;
    if (this.#scratch !== undefined) {
      this.#flushPending(); // a recorded copy may name the scratch buffer; submitted work keeps it until done
      this.#scratch.destroy();
      this.#scratch = undefined;
    }
    return fits();
  }

  /** True when a staging buffer for `length` bytes fits the budget now, after giving pooled staging back if needed. */
  #stagingFits(length: number): boolean {
    if (this.#readback.hasPooled(length)) return true; // reusing it adds nothing
    const size = this.#readback.sizeFor(length);
    const over = this.#reservedBytes + this.#budgetedTransferBytes + size - this.#budgetBytes;
    if (over <= 0) return true;
    this.#readback.trim(over);
    return this.#reservedBytes + this.#budgetedTransferBytes + size <= this.#budgetBytes;
  }

  /**
   * The transfer bytes the budget's checks count: all but the byte-copy kernel's 16-byte params buffer, which is
   * there from the start (`device_bytes` counts it, so it may pass the budget by those 16 bytes).
   */
  get #budgetedTransferBytes(): number {
    return this.#readback.liveBytes + (this.#scratch?.size ?? 0);
  }

  #takeStaging(length: number): GPUBuffer {
    const staging = this.#readback.take(length);
    this.#noteDeviceBytes();
    return staging;
  }

  #noteDeviceBytes(): void {
    const bytes = this.deviceBytes;
    if (bytes > this.#devicePeakBytes) this.#devicePeakBytes = bytes;
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
