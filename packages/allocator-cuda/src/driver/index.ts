// @stowage/allocator-cuda/driver: what the main entry leaves out — the driver binding's handle types, results,
// attributes and flags, the backend's streams and page mapping, the configuration's tables and engine mapping.
export type { CudaContext, CudaEvent, CudaMemHandle, CudaStream, OpenCudaDriverOptions, PinnedHostMemory } from './CudaDriver.js';
export { libcudaSearchPaths } from './CudaDriver.js';
export type { CudaErrorDetails } from './CudaError.js';
export type { CudaMemoryBackendOptions } from '../backend/CudaMemoryBackend.js';
export { CudaStreams } from '../backend/CudaStreams.js';
export type { CudaAllocatorSettings } from '../CudaAllocator.js';
export { CUDA_ENGINE_DEFAULTS, cudaEngineOptions } from '../CudaAllocator.js';
export type { AllocatorConfValues, NotAppliedKey } from '../config/AllocatorConfValues.js';
export { ALLOCATOR_CONF_VARIABLES, DEFAULT_ALLOCATOR_CONF_VALUES, ROUNDUP_POWER2_INTERVALS } from '../config/AllocatorConf.js';
export type { AllocatorConfKey } from '../config/AllocatorConfKey.js';
export { ALLOCATOR_CONF_KEYS } from '../config/AllocatorConfKey.js';
export { allocatorConfEngineOptions } from '../config/allocatorConfEngineOptions.js';
export { CUDA_IPC_HANDLE_BYTES, CudaDeviceAttribute, CudaEventFlags, CudaResult } from './CudaResult.js';
export type { CudaLegacyIpcExport, CudaShareableIpcExport } from '../ipc/CudaIpc.js';
export type { CudaPageMappingOptions } from '../backend/CudaPageMapping.js';
export { CudaPageMapping } from '../backend/CudaPageMapping.js';
