// The driver's ABI as koffi declares it: its C types, the constants the binding passes, and every entry point
// CudaDriver calls (declareDriverCalls).
import { InvalidArgumentError } from '@stowage/core';
import type { LibraryHandle } from 'koffi';
import koffi from 'koffi';

import { CUDA_IPC_HANDLE_BYTES } from './CudaResult.js';

// Note [Pointers as integers]
// Device pointers (`CUdeviceptr`) are 64-bit integers in the driver's ABI and bigints here. Host pointers the
// asynchronous copies read or write after the call returns (pinned memory from cuMemHostAlloc) are also passed as
// integers: the binding declares them `uintptr_t`, which has the ABI of `void *` on every platform the driver runs
// on. Synchronous copies take a Uint8Array, which koffi passes by address for the duration of the call.

const CUresult = 'int';
const CUdevice = 'int';
const CUdeviceptr = 'uint64_t';
const CUcontext = koffi.pointer('CUcontext', koffi.opaque('CUctx_st'));
const CUstream = koffi.pointer('CUstream', koffi.opaque('CUstream_st'));
const CUevent = koffi.pointer('CUevent', koffi.opaque('CUevent_st'));
const CUmemGenericAllocationHandle = 'uint64_t';
const CUmemLocation = koffi.struct('CUmemLocation', { type: 'int', id: 'int' });
const CUmemAllocationProp = koffi.struct('CUmemAllocationProp', {
  type: 'int',
  requestedHandleTypes: 'int',
  location: CUmemLocation,
  win32HandleMetaData: 'void *',
  allocFlags: koffi.struct('CUmemAllocationPropFlags', {
    compressionType: 'uint8_t',
    gpuDirectRDMACapable: 'uint8_t',
    usage: 'uint16_t',
    reserved: koffi.array('uint8_t', 4),
  }),
});
const CUmemAccessDesc = koffi.struct('CUmemAccessDesc', { location: CUmemLocation, flags: 'int' });
// Passed by value: 64 opaque bytes.
const CUipcHandle = koffi.struct('CUipcHandle', { reserved: koffi.array('uint8_t', CUDA_IPC_HANDLE_BYTES, 'Typed') });

// cuda.h values the binding passes (CUmemAllocationType, CUmemLocationType, CUmemAllocationHandleType,
// CUmemAccess_flags, CUmemAllocationGranularity_flags, CUipcMem_flags).
const CU_MEM_ALLOCATION_TYPE_PINNED = 1;
export const CU_MEM_LOCATION_TYPE_DEVICE = 1;
const CU_MEM_HANDLE_TYPE_NONE = 0;
export const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1;
export const CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3;
export const CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0;
export const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1;
export const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1;

type Fn = (...args: unknown[]) => number;
/** A koffi type: a C type name or a type object (koffi does not export its own alias). */
type TypeSpec = Parameters<typeof koffi.out>[0];

/** Binds every driver entry point the binding calls, with its C signature. */
export function declareDriverCalls(lib: LibraryHandle) {
  const f = (name: string, args: TypeSpec[]): Fn => lib.func(name, CUresult, args) as Fn;
  const out = (t: TypeSpec) => koffi.out(koffi.pointer(t));
  return {
    cuInit: f('cuInit', ['uint']),
    cuDriverGetVersion: f('cuDriverGetVersion', [out('int')]),
    cuDeviceGetCount: f('cuDeviceGetCount', [out('int')]),
    cuDeviceGet: f('cuDeviceGet', [out(CUdevice), 'int']),
    cuDeviceGetAttribute: f('cuDeviceGetAttribute', [out('int'), 'int', CUdevice]),
    cuDeviceGetName: f('cuDeviceGetName', [koffi.pointer('uint8_t'), 'int', CUdevice]),
    cuDeviceTotalMem_v2: f('cuDeviceTotalMem_v2', [out('size_t'), CUdevice]),
    cuDevicePrimaryCtxRetain: f('cuDevicePrimaryCtxRetain', [out(CUcontext), CUdevice]),
    cuDevicePrimaryCtxRelease_v2: f('cuDevicePrimaryCtxRelease_v2', [CUdevice]),
    cuCtxSetCurrent: f('cuCtxSetCurrent', [CUcontext]),
    cuCtxGetCurrent: f('cuCtxGetCurrent', [out(CUcontext)]),
    cuMemAlloc_v2: f('cuMemAlloc_v2', [out(CUdeviceptr), 'size_t']),
    cuMemFree_v2: f('cuMemFree_v2', [CUdeviceptr]),
    cuMemGetInfo_v2: f('cuMemGetInfo_v2', [out('size_t'), out('size_t')]),
    cuMemHostAlloc: f('cuMemHostAlloc', [out('void *'), 'size_t', 'uint']),
    cuMemFreeHost: f('cuMemFreeHost', ['uintptr_t']),
    cuMemcpyHtoD_v2: f('cuMemcpyHtoD_v2', [CUdeviceptr, koffi.pointer('uint8_t'), 'size_t']),
    cuMemcpyDtoH_v2: f('cuMemcpyDtoH_v2', [koffi.pointer('uint8_t'), CUdeviceptr, 'size_t']),
    cuMemcpyDtoD_v2: f('cuMemcpyDtoD_v2', [CUdeviceptr, CUdeviceptr, 'size_t']),
    cuMemcpyHtoDAsync_v2: f('cuMemcpyHtoDAsync_v2', [CUdeviceptr, 'uintptr_t', 'size_t', CUstream]),
    cuMemcpyDtoHAsync_v2: f('cuMemcpyDtoHAsync_v2', ['uintptr_t', CUdeviceptr, 'size_t', CUstream]),
    cuMemcpyDtoDAsync_v2: f('cuMemcpyDtoDAsync_v2', [CUdeviceptr, CUdeviceptr, 'size_t', CUstream]),
    cuStreamCreate: f('cuStreamCreate', [out(CUstream), 'uint']),
    cuStreamDestroy_v2: f('cuStreamDestroy_v2', [CUstream]),
    cuStreamSynchronize: f('cuStreamSynchronize', [CUstream]),
    cuStreamQuery: f('cuStreamQuery', [CUstream]),
    cuStreamWaitEvent: f('cuStreamWaitEvent', [CUstream, CUevent, 'uint']),
    cuEventCreate: f('cuEventCreate', [out(CUevent), 'uint']),
    cuEventRecord: f('cuEventRecord', [CUevent, CUstream]),
    cuEventQuery: f('cuEventQuery', [CUevent]),
    cuEventSynchronize: f('cuEventSynchronize', [CUevent]),
    cuEventDestroy_v2: f('cuEventDestroy_v2', [CUevent]),
    cuMemGetAllocationGranularity: f('cuMemGetAllocationGranularity', [out('size_t'), koffi.pointer(CUmemAllocationProp), 'int']),
    cuMemAddressReserve: f('cuMemAddressReserve', [out(CUdeviceptr), 'size_t', 'size_t', CUdeviceptr, 'uint64_t']),
    cuMemAddressFree: f('cuMemAddressFree', [CUdeviceptr, 'size_t']),
    cuMemCreate: f('cuMemCreate', [out(CUmemGenericAllocationHandle), 'size_t', koffi.pointer(CUmemAllocationProp), 'uint64_t']),
    cuMemRelease: f('cuMemRelease', [CUmemGenericAllocationHandle]),
    cuMemMap: f('cuMemMap', [CUdeviceptr, 'size_t', 'size_t', CUmemGenericAllocationHandle, 'uint64_t']),
    cuMemSetAccess: f('cuMemSetAccess', [CUdeviceptr, 'size_t', koffi.pointer(CUmemAccessDesc), 'size_t']),
    cuMemUnmap: f('cuMemUnmap', [CUdeviceptr, 'size_t']),
    cuMemExportToShareableHandle: f('cuMemExportToShareableHandle', [out('int'), CUmemGenericAllocationHandle, 'int', 'uint64_t']),
    // osHandle is `void *`; a POSIX file descriptor travels as its value (Note [Pointers as integers]).
    cuMemImportFromShareableHandle: f('cuMemImportFromShareableHandle', [out(CUmemGenericAllocationHandle), 'uintptr_t', 'int']),
    cuMemGetAddressRange_v2: f('cuMemGetAddressRange_v2', [out(CUdeviceptr), out('size_t'), CUdeviceptr]),
    cuIpcGetMemHandle: f('cuIpcGetMemHandle', [koffi.pointer('uint8_t'), CUdeviceptr]),
    cuIpcOpenMemHandle_v2: f('cuIpcOpenMemHandle_v2', [out(CUdeviceptr), CUipcHandle, 'uint']),
    cuIpcCloseMemHandle: f('cuIpcCloseMemHandle', [CUdeviceptr]),
    cuIpcGetEventHandle: f('cuIpcGetEventHandle', [koffi.pointer('uint8_t'), CUevent]),
    cuIpcOpenEventHandle: f('cuIpcOpenEventHandle', [out(CUevent), CUipcHandle]),
    cuGetErrorName: f('cuGetErrorName', [CUresult, out('const char *')]),
    cuGetErrorString: f('cuGetErrorString', [CUresult, out('const char *')]),
  };
}

export type DriverCalls = ReturnType<typeof declareDriverCalls>;

/** A `CUmemAllocationProp` for pinned device memory on `device`. */
export function allocationProp(device: number, shareable: boolean) {
  return {
    type: CU_MEM_ALLOCATION_TYPE_PINNED,
    requestedHandleTypes: shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE,
    location: { type: CU_MEM_LOCATION_TYPE_DEVICE, id: device },
    win32HandleMetaData: null,
    allocFlags: { compressionType: 0, gpuDirectRDMACapable: 0, usage: 0, reserved: [0, 0, 0, 0] },
  };
}

/** `handle`, checked to be an IPC handle's 64 bytes. @throws InvalidArgumentError otherwise */
export function ipcHandleBytes(handle: Uint8Array): Uint8Array {
  if (handle.byteLength !== CUDA_IPC_HANDLE_BYTES) {
    throw new InvalidArgumentError('handle', handle, `a Uint8Array of ${CUDA_IPC_HANDLE_BYTES} bytes (an IPC handle)`);
  }
  return handle;
}
export type DriverCallName = keyof DriverCalls;
