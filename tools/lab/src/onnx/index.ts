// @stowage/lab/onnx: onnxruntime-web (and transformers.js) set up in Node on Dawn for tests and benches — WebGPU's
// globals as ORT looks for them, devices with the adapter's limits that count their buffers, and the ONNX models
// that installed packages ship. Node only; it imports `webgpu` (Dawn) when asked to install its globals.
export type { BufferCount } from './ortDevice.js';
export { copySharedUploads, countBuffers, ORT_LIMITS, ortDevice, ortUnavailable } from './ortDevice.js';
export { installWebGpuGlobals } from './webGpuGlobals.js';
export type { OrtWebModule } from './ortForTransformersJs.js';
export { installOrtForTransformersJs } from './ortForTransformersJs.js';
