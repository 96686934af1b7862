export type { CudaContext, CudaEvent, CudaMemHandle, CudaStream, OpenCudaDriverOptions, PinnedHostMemory } from './driver/CudaDriver.js';
export { CudaDriver, DEFAULT_LIBCUDA_PATHS, libcudaSearchPaths } from './driver/CudaDriver.js';
export type { CudaErrorDetails } from './driver/CudaError.js';
export { CudaError, isCudaError } from './driver/CudaError.js';
export type { CudaMemoryBackendOptions } from './backend/CudaMemoryBackend.js';
export { CudaMemoryBackend } from './backend/CudaMemoryBackend.js';
export { CudaStreams } from './backend/CudaStreams.js';
export type { CudaAllocatorSettings } from './CudaAllocator.js';
export { CudaAllocator } from './CudaAllocator.js';
export type { CudaOptions, OpenedCudaDriver } from './cuda.js';
export { createCudaAllocator, cuda, openCudaDriver, registerCudaAllocator } from './cuda.js';
export type { AllocatorConf, AllocatorConfValues, NotAppliedKey } from './config/AllocatorConfValues.js';
export {
  ALLOCATOR_CONF_VARIABLES,
  DEFAULT_ALLOCATOR_CONF_VALUES,
  formatAllocatorConf,
  parseAllocatorConf,
  readAllocatorConfFromEnv,
  ROUNDUP_POWER2_INTERVALS,
} from './config/AllocatorConf.js';
export { AllocatorConfError, isAllocatorConfError } from './config/AllocatorConfError.js';
export type { AllocatorConfKey } from './config/AllocatorConfKey.js';
export { ALLOCATOR_CONF_KEYS } from './config/AllocatorConfKey.js';
export { allocatorConfEngineOptions } from './config/allocatorConfEngineOptions.js';
export { CUDA_IPC_HANDLE_BYTES, CudaDeviceAttribute, CudaEventFlags, CudaResult } from './driver/CudaResult.js';
export type { CudaIpcExport, CudaLegacyIpcExport, CudaShareableIpcExport } from './ipc/CudaIpc.js';
export type { CudaPageMappingOptions } from './backend/CudaPageMapping.js';
export { CudaPageMapping } from './backend/CudaPageMapping.js';
export { CudaPager } from './backend/CudaPager.js';
