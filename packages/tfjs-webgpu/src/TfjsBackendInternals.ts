import type { DataType, GPUData, TensorInfo, WebGPUData, Tensor, BackendValues } from '@tensorflow/tfjs-core';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';

/** A tfjs data id (an opaque object). */
export type DataId = object;

/** What tfjs's WebGPU backend keeps per data id (`TensorData` in its backend_webgpu.d.ts; not exported). */
export interface TensorData {
  values: BackendValues | null;
  dtype: DataType;
  shape: number[];
  refCount: number;
  /** A GPUBuffer or texture in tfjs; in the Stowage backend also a Stowage StorageImpl. */
  resource?: unknown;
  external?: boolean;
}

/**
 * Note [Overriding tfjs's private members]: the members of tfjs 4.22's `WebGPUBackend` that bind, copy, upload and
 * release whole buffers are `private` in its declarations (`tensorToBinding`, `releaseResource`, `copyBuffer`,
 * `commandEncoder`, …) though plain methods and fields at run time. A subclass cannot override a private member
 * in TypeScript, so the Stowage backend extends the same class seen through this interface, which declares those
 * members as the backend's dist/backend_webgpu.js defines them. `instanceof WebGPUBackend` still holds. A tfjs
 * version that renames one of them breaks the backend: the peer dependency is pinned to 4.22.0 for that reason.
 */
export interface WebGpuBackendInternals extends Omit<WebGPUBackend, 'tensorMap' | 'bufferManager' | 'runWebGPUProgram' | 'read' | 'readSync' | 'numDataIds' | 'write' | 'incRef' | 'decRef' | 'disposeData'> {
  bufferManager: unknown;
  tensorMap: { get(dataId: DataId): TensorData; has(dataId: DataId): boolean };
  commandEncoder: GPUCommandEncoder | null;
  tensorToBinding(tensor?: TensorInfo): GPUBindingResource | null;
  submitQueue(): void;
  dispose(): void;
  makeUniforms(programUniform: unknown): GPUBindingResource;
  recordAndSubmit(program: unknown, output: TensorInfo, inputs: TensorInfo[], programDefinedUniform?: unknown): void;
  releaseResource(dataId: DataId): void;
  copyBuffer(srcBuffer: GPUBuffer): unknown;
  uploadToGPU(dataId: DataId): void;
  runWebGPUProgram(program: unknown, inputs: TensorInfo[], outputDtype: DataType, programDefinedUniform?: unknown, output?: TensorInfo): TensorInfo;
  read(dataId: DataId): Promise<BackendValues>;
  getBufferData(buffer: unknown): Promise<ArrayBuffer>;
  readToGPU(dataId: DataId): GPUData;
  /** Public in tfjs, but declared there as KernelBackend's with its DataId type; a method here so it can be overridden. */
  readSync(dataId: DataId): BackendValues;
  createTensorFromGPUData(webGPUData: WebGPUData, shape: number[], dtype: DataType): Tensor;
  /** Public in tfjs; methods here so the reference counting can be overridden (Note [A failing kernel leaves nothing behind]). */
  numDataIds(): number;
  write(values: BackendValues | null, shape: number[], dtype: DataType): DataId;
  incRef(dataId: DataId): void;
  decRef(dataId: DataId): void;
  disposeData(dataId: DataId, force?: boolean): boolean;
}

/** The constructor of {@link WebGpuBackendInternals}: tfjs's class, typed with its internals visible. */
export type WebGpuBackendInternalsClass = new (device: GPUDevice, adapterInfo?: GPUAdapterInfo) => WebGpuBackendInternals;
