/*
 * Prints the ABI facts the stand-in relies on, one `name value` line each: struct sizes and field offsets, enum
 * values and flags. Compiled once against the toolkit's cuda.h and once with -DSTOWAGE_CUDA_FALLBACK_HEADER
 * against cuda_fallback.h; the two outputs must be equal (test/StandInFallbackHeader.test.ts).
 */
#ifdef STOWAGE_CUDA_FALLBACK_HEADER
#include "cuda_fallback.h"
#else
#include <cuda.h>
#endif
#include <stddef.h>
#include <stdio.h>

#define SIZE(t) printf("sizeof(" #t ") %zu\n", sizeof(t))
#define OFFSET(t, f) printf("offsetof(" #t ", " #f ") %zu\n", offsetof(t, f))
#define VALUE(v) printf(#v " %lld\n", (long long)(v))

int main(void) {
  SIZE(CUdeviceptr);
  SIZE(CUdevice);
  SIZE(CUresult);
  SIZE(CUmemGenericAllocationHandle);
  SIZE(CUipcMemHandle);
  SIZE(CUipcEventHandle);
  SIZE(CUmemLocation);
  OFFSET(CUmemLocation, type);
  OFFSET(CUmemLocation, id);
  SIZE(CUmemAllocationProp);
  OFFSET(CUmemAllocationProp, type);
  OFFSET(CUmemAllocationProp, requestedHandleTypes);
  OFFSET(CUmemAllocationProp, location);
  OFFSET(CUmemAllocationProp, win32HandleMetaData);
  OFFSET(CUmemAllocationProp, allocFlags);
  OFFSET(CUmemAllocationProp, allocFlags.compressionType);
  OFFSET(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable);
  OFFSET(CUmemAllocationProp, allocFlags.usage);
  OFFSET(CUmemAllocationProp, allocFlags.reserved);
  SIZE(CUmemAccessDesc);
  OFFSET(CUmemAccessDesc, location);
  OFFSET(CUmemAccessDesc, flags);

  VALUE(CUDA_SUCCESS);
  VALUE(CUDA_ERROR_INVALID_VALUE);
  VALUE(CUDA_ERROR_OUT_OF_MEMORY);
  VALUE(CUDA_ERROR_NOT_INITIALIZED);
  VALUE(CUDA_ERROR_DEINITIALIZED);
  VALUE(CUDA_ERROR_NO_DEVICE);
  VALUE(CUDA_ERROR_INVALID_DEVICE);
  VALUE(CUDA_ERROR_INVALID_CONTEXT);
  VALUE(CUDA_ERROR_MAP_FAILED);
  VALUE(CUDA_ERROR_INVALID_HANDLE);
  VALUE(CUDA_ERROR_NOT_FOUND);
  VALUE(CUDA_ERROR_NOT_READY);
  VALUE(CUDA_ERROR_ILLEGAL_ADDRESS);
  VALUE(CUDA_ERROR_LAUNCH_FAILED);
  VALUE(CUDA_ERROR_NOT_SUPPORTED);
  VALUE(CUDA_ERROR_UNKNOWN);

  VALUE(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  VALUE(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  VALUE(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
  VALUE(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
  VALUE(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED);

  VALUE(CU_STREAM_DEFAULT);
  VALUE(CU_STREAM_NON_BLOCKING);
  VALUE(CU_EVENT_DEFAULT);
  VALUE(CU_EVENT_BLOCKING_SYNC);
  VALUE(CU_EVENT_DISABLE_TIMING);
  VALUE(CU_EVENT_INTERPROCESS);
  VALUE(CU_IPC_HANDLE_SIZE);
  VALUE(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);

  VALUE(CU_MEM_HANDLE_TYPE_NONE);
  VALUE(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  VALUE(CU_MEM_HANDLE_TYPE_WIN32);
  VALUE(CU_MEM_HANDLE_TYPE_WIN32_KMT);
  VALUE(CU_MEM_ACCESS_FLAGS_PROT_NONE);
  VALUE(CU_MEM_ACCESS_FLAGS_PROT_READ);
  VALUE(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  VALUE(CU_MEM_LOCATION_TYPE_INVALID);
  VALUE(CU_MEM_LOCATION_TYPE_DEVICE);
  VALUE(CU_MEM_ALLOCATION_TYPE_INVALID);
  VALUE(CU_MEM_ALLOCATION_TYPE_PINNED);
  VALUE(CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  VALUE(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  return 0;
}
