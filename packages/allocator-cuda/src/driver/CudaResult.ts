/** The `CUresult` values this package names (cuda.h `cudaError_enum`). */
export const CudaResult = {
  SUCCESS: 0,
  INVALID_VALUE: 1,
  OUT_OF_MEMORY: 2,
  NOT_INITIALIZED: 3,
  INVALID_DEVICE: 101,
  INVALID_CONTEXT: 201,
  MAP_FAILED: 205,
  INVALID_HANDLE: 400,
  NOT_FOUND: 500,
  NOT_READY: 600,
  NOT_SUPPORTED: 801,
  UNKNOWN: 999,
} as const;

/** `CUdevice_attribute` values the binding is known to be asked for (cuda.h). */
export const CudaDeviceAttribute = {
  WARP_SIZE: 10,
  MULTIPROCESSOR_COUNT: 16,
  UNIFIED_ADDRESSING: 41,
  COMPUTE_CAPABILITY_MAJOR: 75,
  COMPUTE_CAPABILITY_MINOR: 76,
  VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: 102,
  HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: 103,
  IPC_EVENT_SUPPORTED: 125,
} as const;

/** `CUevent_flags` for `CudaDriver#eventCreate` (cuda.h); an `INTERPROCESS` event must also be `DISABLE_TIMING`. */
export const CudaEventFlags = {
  DEFAULT: 0,
  BLOCKING_SYNC: 1,
  DISABLE_TIMING: 2,
  INTERPROCESS: 4,
} as const;

/** The size in bytes of a `CUipcMemHandle` and a `CUipcEventHandle` (cuda.h `CU_IPC_HANDLE_SIZE`). */
export const CUDA_IPC_HANDLE_BYTES = 64;
