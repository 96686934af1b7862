import type { BackendValues, DataType, GPUData, Tensor, TensorInfo, WebGPUData } from '@tensorflow/tfjs-core';
import { engine, util } from '@tensorflow/tfjs-core';
import { WebGPUBackend, webgpu_util } from '@tensorflow/tfjs-backend-webgpu';
import type { BufferManager } from '@tensorflow/tfjs-backend-webgpu/dist/buffer_manager.js';
import type { DataPtr, Runtime } from '@stowage/core';
import { StorageImpl } from '@stowage/core';
import { checkEnum } from '@stowage/core/plugin-kit';
import { fromGpuBuffer } from '@stowage/allocator-webgpu';
import type { Residency } from '@stowage/lms';
import { LmsAllocator, StorageResidency } from '@stowage/lms';
import type { ReadWriteStorageCounts } from './ReadWriteStorage.js';
import { readWriteStorageDevice } from './ReadWriteStorage.js';
import { StowageBufferManager, TENSOR_USAGE } from './StowageBufferManager.js';
import { SynchronousStepPolicy, tfjsStepHints } from './SynchronousStepPolicy.js';
import { KernelPins } from './KernelPins.js';
import { InputRelocation } from './InputRelocation.js';
import { UniformCapture } from './UniformCapture.js';
import { KernelReferences } from './KernelReferences.js';
import { settleHostCopies } from './settleHostCopies.js';
import { readWithinBudget } from './readWithinBudget.js';
import type { DataId, WebGpuBackendInternalsClass } from './TfjsBackendInternals.js';
import { webGpuAllocatorOf } from './webGpuAllocatorOf.js';

/** What `lmsSettle` copies to host memory (Note [Host copies where a reclaim is predicted]). */
export interface LmsSettleOptions {
  /**
   * `'predicted'` (default): the dirty inactive tensors where a reclaim is predicted; `'all'`: every inactive
   * tensor without a host copy.
   */
  readonly hostCopies?: 'predicted' | 'all';
}

export interface StowageWebGpuBackendOptions {
  /** The runtime's WebGPU device the tensors live on. Default `'webgpu'` (`webgpu:0`). */
  readonly device?: string;
  /** Passed to tfjs's backend (it tunes a few kernels for Intel GPUs by it). */
  readonly adapterInfo?: GPUAdapterInfo;
  /**
   * Where a dispatch's uniforms go: `'stowage'` (default without LMS), ranges of the allocator's uniform segments
   * (Note [Uniforms through Stowage]); `'tfjs'` (default under LMS: Note [LMS inside a synchronous step]), tfjs's
   * pool of whole buffers by exact size (no uniform segment: one segment less reserved, a few dozen more
   * createBuffer calls).
   */
  readonly uniforms?: 'stowage' | 'tfjs';
}

const UNIFORM_PLACES = ['stowage', 'tfjs'] as const;
const HOST_COPIES = ['predicted', 'all'] as const;
const MiB = 2 ** 20;

// Note [Clean uploads]: `uploadToGPU` writes a tensor's host values (a model's weights, a prediction's input) with
// `queue.writeBuffer`; under LMS a copy of those values becomes the storage's host copy (`adoptHostCopy`), so the
// tensor is clean from its upload: a reclaim, even inside the synchronous step that uploaded it, only frees its
// block, and bringing it back is a `writeBuffer`. Weights therefore never need a page-out, and the floor of a
// prediction is its activations (tools/lab's `realFloor`), not its activations plus its weights.
//

/** tfjs's class with the members it overrides visible (Note [Overriding tfjs's private members]). */
const TfjsWebGpuBackend = WebGPUBackend as unknown as WebGpuBackendInternalsClass;

/**
 * TensorFlow.js's WebGPU backend (tfjs-backend-webgpu 4.22) on a Stowage runtime's WebGPU device: every tensor's
 * storage is a Stowage storage, a `{ buffer, offset, size }` range of the WebGPU allocator's segments, instead of a
 * GPUBuffer of its own. Kernels, shaders, the command encoder and the submit batching are tfjs's; what is
 * overridden is what assumed a whole buffer per tensor:
 * - `uploadToGPU` allocates through Stowage and uploads with `Runtime#write` (`queue.writeBuffer`);
 * - `tensorToBinding` binds the range; `getBufferData` submits, then reads the range with `Runtime#read`;
 * - `copyBuffer` (a tensor copied from a caller's GPUBuffer) and `readToGPU` (`dataToGPU`: a whole GPUBuffer for
 *   the caller, from tfjs's pool, since tfjs's GPUData carries no offset) copy to and from ranges;
 * - `createTensorFromGPUData` with `zeroCopy` imports the caller's buffer (`fromGpuBuffer`: zero-copy, never
 *   destroyed by Stowage) when it has STORAGE | COPY_SRC | COPY_DST usage, else keeps tfjs's handling;
 * - `releaseResource` releases the storage inside `freeingSubmitted`: tfjs calls it only once the last command
 *   buffer that bound the tensor is submitted (Note [Frees after their submit] in @stowage/allocator-webgpu).
 * - `makeUniforms`: a dispatch's uniforms land in a range of a Stowage uniform segment (Note [Uniforms through
 *   Stowage]), freed at the submit.
 * Shaders see inputs as `read_write` (Note [Storage usage per buffer]). Under `lms()`, `runWebGPUProgram` pins a
 * kernel's tensors until the submit that runs it and reads are async points where host copies are made (Note [LMS
 * inside a synchronous step]; `lmsSettle`, `endLmsStep`).
 *
 * - `readSync` (`dataSync`, browser only: tfjs reads through a canvas) reads a whole-buffer copy, as `readToGPU`
 *   makes, with the GPUDevice itself.
 */
export class StowageWebGpuBackend extends TfjsWebGpuBackend {
  readonly runtime: Runtime;
  /** The GPUDevice itself (tfjs's `device` field is the read_write proxy of it). */
  readonly gpuDevice: GPUDevice;
  /** Tensor storage through Stowage, every other buffer through tfjs's manager. */
  readonly storageManager: StowageBufferManager;
  /** Shaders compiled, declarations rewritten and inputs copied (Note [Storage usage per buffer]). */
  readonly readWriteCounts: ReadWriteStorageCounts;
  /** The storages bound so far by the dispatch being recorded; null outside `recordAndSubmit`. */
  #bound: Set<StorageImpl> | null = null;
  /** Dirty inputs moved out of a kernel's output's way (Note [Moving dirty inputs out of the output's way]). */
  readonly #relocation = new InputRelocation({
    device: () => this.gpuDevice,
    encoder: () => {
      this.ensureCommandEncoderReady();
      this.endComputePassEncoder();
      return this.commandEncoder!;
    },
    submitNow: () => this.#submitNow(),
    bindingOf: (storage) => this.storageManager.allocator.bindingOf(storage.data()),
    acquireStorage: (byteLength) => {
      this.#pins.makeRoom(byteLength);
      return this.storageManager.acquireStorage(byteLength);
    },
    releaseStorage: (storage) => this.storageManager.releaseStorage(storage),
    owns: (storage) => this.storageManager.owns(storage),
    unpinKernel: () => this.#pins.kernelFailed(),
    pinKernel: (storages) => this.#pins.pinForKernel(storages),
  });
  /** True while `runWebGPUProgram` runs under LMS: a storage allocated then is the kernel's, and pinned. */
  #inProgram = false;
  /** Uniform blocks of the dispatches recorded since the last submit (Note [Uniforms through Stowage]). */
  #uniforms: DataPtr[] = [];
  /** Copies of inputs bound twice in one dispatch (whole buffers of tfjs's pool), released at the next submit. */
  #aliasCopies: GPUBuffer[] = [];
  /**
   * LMS on the tensors' device (Note [LMS inside a synchronous step]), when the runtime has `lms()` and the device's
   * allocator pages; null otherwise.
   */
  readonly lmsDevice: Residency | null;
  /** The kernels' pins under LMS (Note [LMS inside a synchronous step], KernelPins.ts). */
  readonly #pins = new KernelPins(
    () => this.#submitNow(),
    () => this.storageManager.allocator,
  );
  /** True once the kernel `runWebGPUProgram` runs under LMS was recorded (its pins then last until its submit). */
  #recordedInProgram = false;
  /** True while tfjs's `recordAndSubmit` runs: a submit then runs the current kernel too. */
  #recording = false;
  /** The references running kernels' own code holds (Note [A failing kernel leaves nothing behind], KernelReferences.ts). */
  readonly #kernelRefs = new KernelReferences<DataId>();
  /** Storages a kernel has read since they were written (StepHints). */
  readonly #readSinceWritten = new WeakSet<StorageImpl>();
  /** LMS's `reclaimedBytes` at the end of the last async point (Note [Host copies where a reclaim is predicted]). */
  #reclaimedBytesAtSettle = 0;
  /** `endLmsStep()` calls so far. */
  #endedSteps = 0;

  /**
   * @throws InvalidArgumentError when the runtime's `device` allocator is not Stowage's WebGPU allocator; tfjs's
   * Error when the WebGPU globals are missing (`registerStowageWebGpuBackend` installs them in Node)
   */
  constructor(runtime: Runtime, options: StowageWebGpuBackendOptions = {}) {
    const device = options.device ?? 'webgpu';
    checkEnum('options.uniforms', options.uniforms, UNIFORM_PLACES);
    const allocator = webGpuAllocatorOf(runtime, device);
    const gpuDevice = allocator.backend.gpuDevice;
    const counts: ReadWriteStorageCounts = { shaders: 0, rewrittenDeclarations: 0, aliasCopies: 0, aliasCopyBytes: 0 };
    const deviceAllocator = runtime.allocator(device);
    const lmsDevice = deviceAllocator instanceof LmsAllocator ? deviceAllocator.lms : null;
    const capture = (options.uniforms ?? (lmsDevice === null ? 'stowage' : 'tfjs')) === 'stowage' ? new UniformCapture(gpuDevice) : null;
    super(readWriteStorageDevice(gpuDevice, counts, capture?.queue), options.adapterInfo);
    this.runtime = runtime;
    this.gpuDevice = gpuDevice;
    this.readWriteCounts = counts;
    this.storageManager = new StowageBufferManager(runtime, allocator, device, this.bufferManager as BufferManager, capture);
    this.bufferManager = this.storageManager;
    this.lmsDevice = lmsDevice;
    const policy = lmsDevice?.policy;
    if (policy instanceof SynchronousStepPolicy) policy.attach(tfjsStepHints(this.#readSinceWritten, (dataId) => (this.tensorMap.has(dataId) ? this.tensorMap.get(dataId).resource : undefined)));
  }

  /** tfjs packs and "writes" the uniforms; with uniforms through Stowage they land in a uniform block's range. */
  override makeUniforms(programUniform: unknown): GPUBindingResource {
    const binding = super.makeUniforms(programUniform) as GPUBufferBinding;
    const capture = this.storageManager.uniformCapture;
    if (capture === null || binding.buffer !== capture.buffer) return binding;
    const allocator = this.storageManager.allocator;
    const bytes = capture.take();
    const ptr = allocator.allocate(bytes.byteLength, { usage: 'uniform' });
    allocator.writeBytes(ptr, bytes);
    this.#uniforms.push(ptr);
    return allocator.bindingOf(ptr);
  }

  /** tfjs's; the engine calls it as each kernel starts, which opens the kernel's count (Note [A failing kernel leaves nothing behind]). */
  override numDataIds(): number {
    this.#kernelRefs.kernelStarted(kernelDepth());
    return super.numDataIds();
  }

  override write(values: BackendValues | null, shape: number[], dtype: DataType): DataId {
    const dataId = super.write(values, shape, dtype);
    this.#kernelRefs.count(kernelDepth(), dataId, 1);
    return dataId;
  }

  override incRef(dataId: DataId): void {
    super.incRef(dataId);
    this.#kernelRefs.count(kernelDepth(), dataId, 1);
  }

  override decRef(dataId: DataId): void {
    super.decRef(dataId);
    this.#kernelRefs.count(kernelDepth(), dataId, -1);
  }

  override disposeData(dataId: DataId, force = false): boolean {
    this.#kernelRefs.count(kernelDepth(), dataId, force ? Number.NEGATIVE_INFINITY : -1);
    return super.disposeData(dataId, force);
  }

  /**
   * The kernels being unwound by an error from `runWebGPUProgram` give back the references they held, and the
   * failing kernel's pins end (Note [A failing kernel leaves nothing behind]).
   */
  #unwindKernels(): void {
    const held = this.#kernelRefs.unwind();
    this.#pins.kernelFailed(); // its dispatch was never recorded
    for (const [dataId, count] of held) {
      for (let i = 0; i < count && this.tensorMap.has(dataId); i++) super.disposeData(dataId);
    }
    this.#releaseUnpinned();
  }

  #releaseUnpinned(): void {
    this.#pins.releaseUnpinned((storage) => this.storageManager.releaseStorage(storage));
  }

  override uploadToGPU(dataId: DataId): void {
    const data = this.tensorMap.get(dataId);
    if (data.resource != null) return;
    const byteLength = webgpu_util.GPUBytesPerElement(data.dtype) * util.sizeFromShape(data.shape);
    if (this.lmsDevice !== null) this.#pins.makeRoom(byteLength);
    const storage = this.storageManager.acquireStorage(byteLength);
    if (this.lmsDevice !== null && this.#inProgram) this.#pins.pinForKernel([storage]);
    if (data.values != null) {
      const values = gpuValues(data.dtype, data.values);
      if (byteLength > 0) this.runtime.write(storage, values);
      // Under LMS the values are the storage's host copy: a reclaim only frees its block (Note [Clean uploads]).
      if (byteLength > 0 && storage.lms instanceof StorageResidency) storage.lms.adoptHostCopy(new Uint8Array(values.buffer.slice(values.byteOffset, values.byteOffset + byteLength)));
      data.values = null; // as tfjs: once uploaded, the values live only on the GPU
    }
    data.resource = storage;
  }

  /**
   * tfjs's, under LMS with the kernel's inputs and output pinned from before its output is allocated until the
   * submit that runs it (Note [LMS inside a synchronous step]); reclaimed inputs are brought back first.
   * @throws TensorBytesInFlightError when an input's bytes are still on their way to host memory
   */
  override runWebGPUProgram(program: unknown, inputs: TensorInfo[], outputDtype: DataType, programDefinedUniform?: unknown, output?: TensorInfo): TensorInfo {
    try {
      return this.#runProgram(program, inputs, outputDtype, programDefinedUniform, output);
    } catch (error) {
      this.#unwindKernels();
      throw error;
    }
  }

  #runProgram(program: unknown, inputs: TensorInfo[], outputDtype: DataType, programDefinedUniform?: unknown, output?: TensorInfo): TensorInfo {
    if (this.lmsDevice === null) return super.runWebGPUProgram(program, inputs, outputDtype, programDefinedUniform, output);
    const resident: StorageImpl[] = [];
    const reclaimed: StorageImpl[] = [];
    let pageInBytes = 0;
    for (const tensor of output === undefined ? inputs : [...inputs, output]) {
      const resource = this.tensorMap.get(tensor.dataId).resource;
      if (!(resource instanceof StorageImpl) || resource.lms === null) continue;
      if (resource.lms.state !== 'reclaimed') resident.push(resource);
      else {
        reclaimed.push(resource);
        pageInBytes += resource.byteLength;
      }
    }
    this.#inProgram = true;
    this.#recordedInProgram = false;
    try {
      // Note [The output before the page-ins]: the resident inputs are pinned (no allocation), then the output is
      // allocated, then the reclaimed inputs come back, largest first.
      this.#pins.pinForKernel(resident);
      const out = (output ??= this.makeTensorInfo((program as { outputShape: number[] }).outputShape, outputDtype));
      const outBytes = this.tensorMap.get(out.dataId).resource == null ? webgpu_util.GPUBytesPerElement(out.dtype) * util.sizeFromShape(out.shape) : 0;
      // Largest first among the output and the page-ins (Note [The output before the page-ins]).
      reclaimed.sort((a, b) => b.byteLength - a.byteLength);
      const allocate = (): void => {
        const larger = reclaimed.filter((s) => s.byteLength > outBytes);
        if (larger.length > 0) this.#pins.makeRoom(pageInBytes);
        if (larger.length > 0) this.#pins.pinForKernel(larger);
        if (outBytes > 0) this.uploadToGPU(out.dataId); // allocated and pinned as the kernel's
        const rest = reclaimed.filter((s) => s.byteLength <= outBytes);
        if (rest.length > 0) this.#pins.makeRoom(pageInBytes);
        if (rest.length > 0) this.#pins.pinForKernel(rest);
      };
      const maxMovedBytes = Math.max(MiB, 0.02 * this.storageManager.allocator.backend.budget.budgetBytes); // the device peak's allowance
      if (outBytes > 0 || reclaimed.length > 0) this.#relocation.allocateKernel(allocate, [...inputs, out].map((t) => this.tensorMap.get(t.dataId)), maxMovedBytes);
      const result = super.runWebGPUProgram(program, inputs, outputDtype, programDefinedUniform, output);
      this.#recordedInProgram = true;
      for (const input of inputs) {
        const resource = this.tensorMap.get(input.dataId).resource;
        if (resource instanceof StorageImpl) this.#readSinceWritten.add(resource);
      }
      const written = this.tensorMap.get(result.dataId).resource;
      if (written instanceof StorageImpl) this.#readSinceWritten.delete(written);
      return result;
    } finally {
      this.#inProgram = false;
      // A kernel that failed before it was recorded keeps its pins for `#unwindKernels` to end now.
      if (this.#recordedInProgram) this.#pins.kernelRecorded();
    }
  }

  override recordAndSubmit(program: unknown, output: TensorInfo, inputs: TensorInfo[], programDefinedUniform?: unknown): void {
    this.#bound = new Set();
    this.#recording = true;
    try {
      super.recordAndSubmit(program, output, inputs, programDefinedUniform);
      this.#recordedInProgram = true;
    } finally {
      this.#bound = null;
      this.#recording = false;
    }
  }

  /**
   * The tensor's range. Within one dispatch, a storage bound a second time is bound as a copy (Note [Storage usage
   * per buffer]: two overlapping writable bindings are invalid).
   */
  override tensorToBinding(tensor?: TensorInfo): GPUBindingResource | null {
    if (!tensor) return null;
    const resource = this.tensorMap.get(tensor.dataId).resource;
    if (!(resource instanceof StorageImpl)) return super.tensorToBinding(tensor);
    const allocator = this.storageManager.allocator;
    if (this.#bound === null || !this.#bound.has(resource)) {
      this.#bound?.add(resource);
      return allocator.bindingOf(resource.data());
    }
    // The copy goes to a buffer of its own, from tfjs's pool: a copy within one buffer is invalid, and a Stowage
    // block may be carved from the source's segment.
    const from = allocator.bindingOf(resource.data());
    const copy = this.storageManager.acquireBuffer(from.size, TENSOR_USAGE);
    this.ensureCommandEncoderReady();
    this.endComputePassEncoder(); // a copy cannot be recorded inside a compute pass; tfjs begins the next one
    this.commandEncoder!.copyBufferToBuffer(from.buffer, from.offset, copy, 0, from.size);
    this.#aliasCopies.push(copy);
    this.readWriteCounts.aliasCopies++;
    this.readWriteCounts.aliasCopyBytes += from.size;
    return { buffer: copy, offset: 0, size: from.size };
  }

  /** tfjs's submit, then the copies and uniform blocks its dispatches bound are released (their last use is submitted). */
  override submitQueue(): void {
    // Note [LMS inside a synchronous step]: unpinned just before tfjs's queue.submit; nothing in between allocates,
    // so no block the recorded work uses can be reclaimed before that work is submitted.
    this.#pins.releaseAtSubmit(this.#recording);
    super.submitQueue();
    this.#relocation.submitted();
    this.#releaseUnpinned();
    if (this.#aliasCopies.length > 0) {
      const copies = this.#aliasCopies;
      this.#aliasCopies = [];
      for (const copy of copies) this.storageManager.releaseBuffer(copy);
    }
    if (this.#uniforms.length > 0) this.#freeUniforms();
  }

  /** tfjs's dispose (its pools, and every tensor storage: StowageBufferManager#dispose), then the uniform blocks. */
  override dispose(): void {
    this.#pins.releaseAll(); // nothing runs any more
    super.dispose();
    if (!this.runtime.isDisposed) this.#freeUniforms(); // a disposed runtime took its allocators with it
    this.storageManager.uniformCapture?.dispose();
  }

  #freeUniforms(): void {
    const uniforms = this.#uniforms;
    this.#uniforms = [];
    const allocator = this.storageManager.allocator;
    allocator.freeingSubmitted(() => {
      for (const ptr of uniforms) allocator.free(ptr);
    });
  }

  /** tfjs's read; under LMS then `lmsSettle()` (a read is an async point: Note [LMS inside a synchronous step]). */
  override async read(dataId: object): Promise<BackendValues> {
    const values = await super.read(dataId);
    if (this.lmsDevice !== null) await this.lmsSettle();
    return values;
  }

  /**
   * An async point for LMS (Note [LMS inside a synchronous step]): submits what tfjs recorded (its kernels' pins
   * end), then starts host copies of the inactive tensors that have none where a reclaim is predicted (Note [Host
   * copies where a reclaim is predicted]), and waits until no page-out of the backend's tensors is in flight; so
   * reclaims in the next synchronous step find complete host copies and only free blocks. The copies' staging is
   * inside the device's budget (Note [One budget] in @stowage/allocator-webgpu): those the device refuses for lack
   * of room are made in further rounds, once the page-outs in flight landed. Does nothing without LMS.
   */
  async lmsSettle(options: LmsSettleOptions = {}): Promise<void> {
    checkEnum('options.hostCopies', options.hostCopies, HOST_COPIES);
    const hostCopies = options.hostCopies ?? 'predicted';
    const lmsDevice = this.lmsDevice;
    if (lmsDevice === null) return;
    if (this.#pins.hasRecorded) this.#submitNow();
    const stats = lmsDevice.stats;
    // Note [Host copies where a reclaim is predicted]: nothing learned yet, or the stretch that just ended reclaimed.
    const copyAll = hostCopies === 'all' || this.#endedSteps === 0 || stats.reclaimedBytes > this.#reclaimedBytesAtSettle;
    await settleHostCopies(lmsDevice, this.storageManager.storages, copyAll);
    this.#reclaimedBytesAtSettle = stats.reclaimedBytes;
  }

  /**
   * The end of one training step under LMS: LMS learns the step's pins as one iteration of the loop (so that
   * later steps are predicted: Note [Speculation] in @stowage/lms), then `lmsSettle()`. Call it after every
   * step, at the same point. Does nothing without LMS.
   */
  async endLmsStep(): Promise<void> {
    if (this.lmsDevice === null) return;
    this.lmsDevice.endIteration();
    this.#endedSteps++;
    await this.lmsSettle();
  }

  /** Ends the compute pass and submits what tfjs recorded (its kernels' pins end). */
  #submitNow(): void {
    this.ensureCommandEncoderReady();
    this.endComputePassEncoder();
    this.submitQueue();
  }

  override async getBufferData(resource: unknown): Promise<ArrayBuffer> {
    if (!(resource instanceof StorageImpl)) return super.getBufferData(resource);
    // As tfjs: what was recorded is submitted before the read (the read's copy is ordered after it).
    this.ensureCommandEncoderReady();
    this.endComputePassEncoder();
    this.submitQueue();
    if (resource.byteLength === 0) return new ArrayBuffer(0);
    const bytes = this.lmsDevice === null ? await this.runtime.read(resource) : await readWithinBudget(this.runtime, this.lmsDevice, this.storageManager.allocator.backend.budget, resource);
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  }

  /** A tensor's copy of a caller's buffer (`createTensorFromGPUData` without `zeroCopy`): a Stowage storage. */
  override copyBuffer(srcBuffer: GPUBuffer): StorageImpl {
    const storage = this.storageManager.acquireStorage(srcBuffer.size);
    const { buffer, offset } = this.storageManager.allocator.bindingOf(storage.data());
    this.ensureCommandEncoderReady();
    this.endComputePassEncoder();
    this.commandEncoder!.copyBufferToBuffer(srcBuffer, 0, buffer, offset, srcBuffer.size);
    this.submitQueue();
    return storage;
  }

  override createTensorFromGPUData(webGPUData: WebGPUData, shape: number[], dtype: DataType): Tensor {
    const tensor = super.createTensorFromGPUData(webGPUData, shape, dtype);
    const data = this.tensorMap.get(tensor.dataId);
    const buffer = webGPUData.buffer;
    if (data.external && data.resource === buffer && (buffer.usage & TENSOR_USAGE) === TENSOR_USAGE && buffer.size % 4 === 0) {
      data.resource = fromGpuBuffer(this.runtime, buffer, { device: this.storageManager.device }); // zero-copy
    }
    return tensor;
  }

  /** `dataToGPU`: a whole GPUBuffer holding the tensor from offset 0 (tfjs's GPUData has no offset). */
  override readToGPU(dataId: DataId): GPUData {
    const source = this.tensorMap.get(dataId);
    if (!(source.resource instanceof StorageImpl)) return super.readToGPU(dataId);
    const { buffer, offset, size } = this.storageManager.allocator.bindingOf(source.resource.data());
    const whole = this.storageManager.acquireBuffer(size, TENSOR_USAGE);
    this.ensureCommandEncoderReady();
    this.endComputePassEncoder();
    this.commandEncoder!.copyBufferToBuffer(buffer, offset, whole, 0, size);
    this.submitQueue();
    const info = this.makeTensorInfo(source.shape, source.dtype);
    const tensorRef = engine().makeTensorFromTensorInfo(info);
    this.tensorMap.get(info.dataId).resource = whole; // released to tfjs's pool by tfjs's releaseResource
    return { tensorRef, buffer: whole };
  }

  /**
   * `dataSync`: tfjs reads a whole GPUBuffer from offset 0 through canvases configured with its `device` (so only in
   * a browser). The tensor's range is copied to a whole buffer first, as for `dataToGPU`, and tfjs reads that with
   * the GPUDevice itself (a canvas refuses the read_write proxy); the values are cached on the tensor, as tfjs's
   * own read caches them.
   */
  override readSync(dataId: DataId): BackendValues {
    const data = this.tensorMap.get(dataId);
    if (!(data.resource instanceof StorageImpl) || data.values != null) return super.readSync(dataId);
    const { tensorRef } = this.readToGPU(dataId);
    const proxy = this.device;
    this.device = this.gpuDevice;
    try {
      data.values = super.readSync(tensorRef.dataId);
      return data.values;
    } finally {
      this.device = proxy;
      tensorRef.dispose();
    }
  }

  override releaseResource(dataId: DataId): void {
    const data = this.tensorMap.has(dataId) ? this.tensorMap.get(dataId) : undefined;
    const resource = data?.resource;
    if (!(resource instanceof StorageImpl)) return super.releaseResource(dataId);
    if (this.storageManager.owns(resource)) this.#pins.releaseWhenUnpinned(resource, (storage) => this.storageManager.releaseStorage(storage));
    else resource.release(); // a caller's buffer (zero-copy): only forgotten, never destroyed
    data!.resource = null;
  }
}

/** A tensor's values as the GPU holds them: int32 and bool as 32-bit integers, float32 as is. */
function gpuValues(dtype: DataType, values: BackendValues): Float32Array | Int32Array {
  if (dtype === 'int32' || dtype === 'bool') return values instanceof Int32Array ? values : Int32Array.from(values as ArrayLike<number>);
  return values instanceof Float32Array ? values : Float32Array.from(values as ArrayLike<number>);
}

/** The engine's kernel nesting depth: 0 outside any kernel, 1 inside a kernel the program called. */
function kernelDepth(): number {
  return (engine() as unknown as { state: { kernelDepth: number } }).state.kernelDepth;
}
