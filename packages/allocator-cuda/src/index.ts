export type { CudaContext, CudaEvent, CudaMemHandle, CudaStream, OpenCudaDriverOptions, PinnedHostMemory } from './driver/CudaDriver.js';
export { CudaDriver, DEFAULT_LIBCUDA_PATHS, libcudaSearchPaths } from './driver/CudaDriver.js';
export type { CudaErrorDetails } from './driver/CudaError.js';
export { CudaError, isCudaError } from './driver/CudaError.js';
export { CUDA_IPC_HANDLE_BYTES, CudaDeviceAttribute, CudaEventFlags, CudaResult } from './driver/CudaResult.js';
