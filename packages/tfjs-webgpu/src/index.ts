export type { ReadWriteStorageCounts } from './ReadWriteStorage.js';
export { readWriteStorageDevice } from './ReadWriteStorage.js';
export type { RegisterStowageWebGpuOptions } from './registerStowageWebGpuBackend.js';
export { registerStowageWebGpuBackend } from './registerStowageWebGpuBackend.js';
export { StowageBufferManager, TENSOR_USAGE } from './StowageBufferManager.js';
export type { StowageWebGpuBackendOptions } from './StowageWebGpuBackend.js';
export { StowageWebGpuBackend } from './StowageWebGpuBackend.js';
export { installWebGpuGlobals } from './webGpuGlobals.js';
export { webGpuAllocatorOf } from './webGpuAllocatorOf.js';
