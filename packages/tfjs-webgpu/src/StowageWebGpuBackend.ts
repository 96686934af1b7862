import type { BackendValues, DataType, GPUData, Tensor, TensorInfo, WebGPUData } from '@tensorflow/tfjs-core';
import { engine, util } from '@tensorflow/tfjs-core';
import { WebGPUBackend, webgpu_util } from '@tensorflow/tfjs-backend-webgpu';
import type { BufferManager } from '@tensorflow/tfjs-backend-webgpu/dist/buffer_manager.js';
import type { DataPtr, Runtime } from '@stowage/core';
import { checkEnum, StorageImpl } from '@stowage/core';
import { fromGpuBuffer } from '@stowage/allocator-webgpu';
import type { ReadWriteStorageCounts } from './ReadWriteStorage.js';
import { readWriteStorageDevice } from './ReadWriteStorage.js';
import { StowageBufferManager, TENSOR_USAGE } from './StowageBufferManager.js';
import { UniformCapture } from './UniformCapture.js';
import type { DataId, WebGpuBackendInternalsClass } from './TfjsBackendInternals.js';
import { webGpuAllocatorOf } from './webGpuAllocatorOf.js';

export interface StowageWebGpuBackendOptions {
  /** The runtime's WebGPU device the tensors live on. Default `'webgpu'` (`webgpu:0`). */
  readonly device?: string;
  /** Passed to tfjs's backend (it tunes a few kernels for Intel GPUs by it). */
  readonly adapterInfo?: GPUAdapterInfo;
  /**
   * Where a dispatch's uniforms go: `'stowage'` (default), ranges of the allocator's uniform segments (Note
   * [Uniforms through Stowage]); `'tfjs'`, tfjs's pool of whole buffers by exact size (no uniform segment: one
   * segment less reserved, a few dozen more createBuffer calls).
   */
  readonly uniforms?: 'stowage' | 'tfjs';
}

const UNIFORM_PLACES = ['stowage', 'tfjs'] as const;

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
 * Shaders see inputs as `read_write` (Note [Storage usage per buffer]).
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
  /** Uniform blocks of the dispatches recorded since the last submit (Note [Uniforms through Stowage]). */
  #uniforms: DataPtr[] = [];
  /** Copies of inputs bound twice in one dispatch (whole buffers of tfjs's pool), released at the next submit. */
  #aliasCopies: GPUBuffer[] = [];

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
    const capture = (options.uniforms ?? 'stowage') === 'stowage' ? new UniformCapture(gpuDevice) : null;
    super(readWriteStorageDevice(gpuDevice, counts, capture?.queue), options.adapterInfo);
    this.runtime = runtime;
    this.gpuDevice = gpuDevice;
    this.readWriteCounts = counts;
    this.storageManager = new StowageBufferManager(runtime, allocator, device, this.bufferManager as BufferManager, capture);
    this.bufferManager = this.storageManager;
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

  override uploadToGPU(dataId: DataId): void {
    const data = this.tensorMap.get(dataId);
    if (data.resource != null) return;
    const byteLength = webgpu_util.GPUBytesPerElement(data.dtype) * util.sizeFromShape(data.shape);
    const storage = this.storageManager.acquireStorage(byteLength);
    if (data.values != null) {
      if (byteLength > 0) this.runtime.write(storage, gpuValues(data.dtype, data.values));
      data.values = null; // as tfjs: once uploaded, the values live only on the GPU
    }
    data.resource = storage;
  }

  override recordAndSubmit(program: unknown, output: TensorInfo, inputs: TensorInfo[], programDefinedUniform?: unknown): void {
    this.#bound = new Set();
    try {
      super.recordAndSubmit(program, output, inputs, programDefinedUniform);
    } finally {
      this.#bound = null;
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
    super.submitQueue();
    if (this.#aliasCopies.length > 0) {
      const copies = this.#aliasCopies;
      this.#aliasCopies = [];
      for (const copy of copies) this.storageManager.releaseBuffer(copy);
    }
    if (this.#uniforms.length > 0) this.#freeUniforms();
  }

  /** tfjs's dispose (its pools, and every tensor storage: StowageBufferManager#dispose), then the uniform blocks. */
  override dispose(): void {
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

  override async getBufferData(resource: unknown): Promise<ArrayBuffer> {
    if (!(resource instanceof StorageImpl)) return super.getBufferData(resource);
    // As tfjs: what was recorded is submitted before the read (the read's copy is ordered after it).
    this.ensureCommandEncoderReady();
    this.endComputePassEncoder();
    this.submitQueue();
    if (resource.byteLength === 0) return new ArrayBuffer(0);
    const bytes = await this.runtime.read(resource);
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
    if (this.storageManager.owns(resource)) this.storageManager.releaseStorage(resource);
    else resource.release(); // a caller's buffer (zero-copy): only forgotten, never destroyed
    data!.resource = null;
  }
}

/** A tensor's values as the GPU holds them: int32 and bool as 32-bit integers, float32 as is. */
function gpuValues(dtype: DataType, values: BackendValues): Float32Array | Int32Array {
  if (dtype === 'int32' || dtype === 'bool') return values instanceof Int32Array ? values : Int32Array.from(values as ArrayLike<number>);
  return values instanceof Float32Array ? values : Float32Array.from(values as ArrayLike<number>);
}
