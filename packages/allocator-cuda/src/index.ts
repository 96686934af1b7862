// @stowage/allocator-cuda: the cuda() plugin, the allocator, its pager and IPC export, the configuration string, the
// driver binding's entry points and errors. The binding's handle types and constants, the backend's pieces and the
// configuration's tables are in '@stowage/allocator-cuda/driver'; the stand-in libcuda in '/testing'.
export { CudaDriver, DEFAULT_LIBCUDA_PATHS } from './driver/CudaDriver.js';
export { CudaError, isCudaError } from './driver/CudaError.js';
export { CudaMemoryBackend } from './backend/CudaMemoryBackend.js';
export { CudaAllocator } from './CudaAllocator.js';
export type { CudaOptions, OpenedCudaDriver } from './cuda.js';
export { createCudaAllocator, cuda, openCudaDriver } from './cuda.js';
export type { AllocatorConf } from './config/AllocatorConfValues.js';
export { formatAllocatorConf, parseAllocatorConf, readAllocatorConfFromEnv } from './config/AllocatorConf.js';
export { AllocatorConfError, isAllocatorConfError } from './config/AllocatorConfError.js';
export type { CudaIpcExport } from './ipc/CudaIpc.js';
export { CudaPager } from './backend/CudaPager.js';
