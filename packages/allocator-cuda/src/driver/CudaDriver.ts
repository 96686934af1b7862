import { BackendUnavailableError } from '@stowage/core';
import type { LibraryHandle } from 'koffi';
import koffi from 'koffi';

import { CudaError } from './CudaError.js';
import { CUDA_IPC_HANDLE_BYTES, CudaResult } from './CudaResult.js';
import type { DriverCallName, DriverCalls } from './driverAbi.js';
import {
  allocationProp,
  CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
  CU_MEM_ALLOC_GRANULARITY_MINIMUM,
  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
  CU_MEM_LOCATION_TYPE_DEVICE,
  declareDriverCalls,
  ipcHandleBytes,
} from './driverAbi.js';

/** An opaque driver handle; `handle` is koffi's pointer value and means nothing to JavaScript. */
export interface CudaContext {
  readonly kind: 'context';
  readonly device: number;
  readonly handle: unknown;
}
export interface CudaStream {
  readonly kind: 'stream';
  readonly handle: unknown;
}
export interface CudaEvent {
  readonly kind: 'event';
  readonly handle: unknown;
}
/** A physical allocation from {@link CudaDriver.memCreate} or an import (`CUmemGenericAllocationHandle`). */
export interface CudaMemHandle {
  readonly kind: 'memory';
  readonly handle: bigint;
}

/** Pinned host memory from {@link CudaDriver.memHostAlloc}. */
export interface PinnedHostMemory {
  readonly address: bigint;
  /** The memory itself (not a copy). */
  readonly bytes: Uint8Array;
}

/** Where {@link CudaDriver.open} looks for libcuda. */
export interface OpenCudaDriverOptions {
  /**
   * Paths (or bare names for the dynamic loader's search) tried in order. Default: `STOWAGE_LIBCUDA` alone when
   * that variable is set, otherwise {@link DEFAULT_LIBCUDA_PATHS}.
   */
  readonly paths?: readonly string[];
}

/** The usual places of the driver library on Linux; a bare name goes through the dynamic loader's own search. */
export const DEFAULT_LIBCUDA_PATHS: readonly string[] = [
  'libcuda.so.1',
  'libcuda.so',
  '/usr/lib/x86_64-linux-gnu/libcuda.so.1',
  '/usr/lib/aarch64-linux-gnu/libcuda.so.1',
  '/usr/lib64/libcuda.so.1',
  '/usr/lib/wsl/lib/libcuda.so.1',
];

/** The paths {@link CudaDriver.open} tries when given none. */
export function libcudaSearchPaths(env: NodeJS.ProcessEnv = process.env): readonly string[] {
  const override = env['STOWAGE_LIBCUDA'];
  return override !== undefined && override !== '' ? [override] : DEFAULT_LIBCUDA_PATHS;
}

/**
 * The CUDA driver API subset Stowage uses, over a libcuda loaded at run time through koffi. Every method calls
 * one driver entry point and throws {@link CudaError} for any result but `CUDA_SUCCESS` (the queries return
 * `false` for `CUDA_ERROR_NOT_READY` instead). Pointers are bigints (Note [Pointers as integers] in driverAbi.ts); streams, events
 * and contexts are opaque handles. A `null` stream is the legacy default stream.
 */
export class CudaDriver {
  /** The path or name libcuda was loaded from. */
  readonly path: string;
  readonly #lib: LibraryHandle;
  readonly #calls: DriverCalls;
  #callCount = 0;

  private constructor(path: string, lib: LibraryHandle) {
    this.path = path;
    this.#lib = lib;
    this.#calls = declareDriverCalls(lib);
  }

  /**
   * Loads the first libcuda found (see {@link OpenCudaDriverOptions.paths}); does not call `cuInit`.
   * Throws `BackendUnavailableError` naming every path tried and why each failed when none loads.
   */
  static open(options: OpenCudaDriverOptions = {}): CudaDriver {
    const paths = options.paths ?? libcudaSearchPaths();
    const failures: string[] = [];
    for (const path of paths) {
      let lib: LibraryHandle;
      try {
        lib = koffi.load(path);
      } catch (error) {
        failures.push(`${path}: ${error instanceof Error ? error.message : String(error)}`);
        continue;
      }
      try {
        return new CudaDriver(path, lib);
      } catch (error) {
        lib.unload();
        failures.push(`${path}: not a CUDA driver (${error instanceof Error ? error.message : String(error)})`);
      }
    }
    throw new BackendUnavailableError(
      `No CUDA driver library (libcuda) could be loaded; tried ${paths.length} path(s) (set STOWAGE_LIBCUDA to choose one): ${failures.join('; ')}.`,
    );
  }

  /**
   * Driver entry points called through this binding's methods so far (`cuGetErrorName`/`cuGetErrorString`,
   * which only describe a failure, and calls made through {@link raw} are not counted).
   */
  get callCount(): number {
    return this.#callCount;
  }

  /** The raw driver function, for a bench or a test hook that needs the unchecked `CUresult`. */
  raw<K extends DriverCallName>(name: K): DriverCalls[K] {
    return this.#calls[name];
  }

  /** The driver's name for a `CUresult` (`cuGetErrorName`), or `CUDA_ERROR_<n>` when it has none. */
  errorName(result: number): string {
    const name: (string | null)[] = [null];
    return this.#calls.cuGetErrorName(result, name) === CudaResult.SUCCESS && name[0] != null ? name[0] : `CUresult ${result}`;
  }

  /** The driver's description of a `CUresult` (`cuGetErrorString`). */
  errorString(result: number): string {
    const text: (string | null)[] = [null];
    return this.#calls.cuGetErrorString(result, text) === CudaResult.SUCCESS && text[0] != null ? text[0] : 'unrecognized error code';
  }

  #check(call: DriverCallName, result: number): void {
    if (result !== CudaResult.SUCCESS) {
      throw new CudaError({ call, result, driverName: this.errorName(result), driverMessage: this.errorString(result) });
    }
  }

  #call(call: DriverCallName, ...args: unknown[]): void {
    this.#callCount++;
    this.#check(call, this.#calls[call](...args));
  }

  /** `cuInit(0)`; idempotent. Every other call but the error names fails with CUDA_ERROR_NOT_INITIALIZED before it. */
  init(): void {
    this.#call('cuInit', 0);
  }

  /** The driver's CUDA version, e.g. 12040 for 12.4. */
  driverVersion(): number {
    const v = [0];
    this.#call('cuDriverGetVersion', v);
    return v[0]!;
  }

  deviceCount(): number {
    const n = [0];
    this.#call('cuDeviceGetCount', n);
    return n[0]!;
  }

  /** The `CUdevice` of an ordinal; CUDA_ERROR_INVALID_DEVICE when out of range. */
  device(ordinal: number): number {
    const d = [0];
    this.#call('cuDeviceGet', d, ordinal);
    return d[0]!;
  }

  /** A `CUdevice_attribute` (see `CudaDeviceAttribute`). */
  deviceAttribute(device: number, attribute: number): number {
    const v = [0];
    this.#call('cuDeviceGetAttribute', v, attribute, device);
    return v[0]!;
  }

  deviceName(device: number): string {
    const buffer = new Uint8Array(256);
    this.#call('cuDeviceGetName', buffer, buffer.length, device);
    const end = buffer.indexOf(0);
    return new TextDecoder().decode(buffer.subarray(0, end < 0 ? buffer.length : end));
  }

  deviceTotalBytes(device: number): number {
    const v = [0];
    this.#call('cuDeviceTotalMem_v2', v, device);
    return Number(v[0]);
  }

  /** Retains the device's primary context; pair with {@link releasePrimaryContext}. */
  retainPrimaryContext(device: number): CudaContext {
    const ctx: unknown[] = [null];
    this.#call('cuDevicePrimaryCtxRetain', ctx, device);
    return { kind: 'context', device, handle: ctx[0] };
  }

  releasePrimaryContext(device: number): void {
    this.#call('cuDevicePrimaryCtxRelease_v2', device);
  }

  /** Makes `context` current on the calling thread (`null`: none). */
  setCurrentContext(context: CudaContext | null): void {
    this.#call('cuCtxSetCurrent', context?.handle ?? null);
  }

  /** Whether some context is current on the calling thread. */
  hasCurrentContext(): boolean {
    const ctx: unknown[] = [null];
    this.#call('cuCtxGetCurrent', ctx);
    return ctx[0] !== null;
  }

  /** `cuMemAlloc_v2`: `bytes` > 0 of device memory; CUDA_ERROR_OUT_OF_MEMORY when the device has no room. */
  memAlloc(bytes: number): bigint {
    const p = [0];
    this.#call('cuMemAlloc_v2', p, bytes);
    return BigInt(p[0]!);
  }

  memFree(ptr: bigint): void {
    this.#call('cuMemFree_v2', ptr);
  }

  /** Free and total bytes of the current context's device. */
  memInfo(): { freeBytes: number; totalBytes: number } {
    const free = [0];
    const total = [0];
    this.#call('cuMemGetInfo_v2', free, total);
    return { freeBytes: Number(free[0]), totalBytes: Number(total[0]) };
  }

  /**
   * Page-locked host memory: its address, for the asynchronous copies, and a view of its bytes. The view is valid
   * until {@link memFreeHost}; touching it afterwards is undefined behaviour.
   */
  memHostAlloc(bytes: number, flags = 0): PinnedHostMemory {
    const p: unknown[] = [null];
    this.#call('cuMemHostAlloc', p, bytes, flags);
    return { address: koffi.address(p[0]), bytes: new Uint8Array(koffi.view(p[0], bytes)) };
  }

  memFreeHost(ptr: bigint): void {
    this.#call('cuMemFreeHost', ptr);
  }

  memcpyHtoD(dst: bigint, src: Uint8Array): void {
    this.#call('cuMemcpyHtoD_v2', dst, src, src.byteLength);
  }

  memcpyDtoH(dst: Uint8Array, src: bigint): void {
    this.#call('cuMemcpyDtoH_v2', dst, src, dst.byteLength);
  }

  memcpyDtoD(dst: bigint, src: bigint, bytes: number): void {
    this.#call('cuMemcpyDtoD_v2', dst, src, bytes);
  }

  /** Queues a copy from host address `src` (pinned; it must stay valid until the copy runs). */
  memcpyHtoDAsync(dst: bigint, src: bigint, bytes: number, stream: CudaStream | null): void {
    this.#call('cuMemcpyHtoDAsync_v2', dst, src, bytes, stream?.handle ?? null);
  }

  memcpyDtoHAsync(dst: bigint, src: bigint, bytes: number, stream: CudaStream | null): void {
    this.#call('cuMemcpyDtoHAsync_v2', dst, src, bytes, stream?.handle ?? null);
  }

  memcpyDtoDAsync(dst: bigint, src: bigint, bytes: number, stream: CudaStream | null): void {
    this.#call('cuMemcpyDtoDAsync_v2', dst, src, bytes, stream?.handle ?? null);
  }

  /** `flags`: 0 (synchronizes with the default stream) or 1 (`CU_STREAM_NON_BLOCKING`). */
  streamCreate(flags = 0): CudaStream {
    const s: unknown[] = [null];
    this.#call('cuStreamCreate', s, flags);
    return { kind: 'stream', handle: s[0] };
  }

  streamDestroy(stream: CudaStream): void {
    this.#call('cuStreamDestroy_v2', stream.handle);
  }

  streamSynchronize(stream: CudaStream | null): void {
    this.#call('cuStreamSynchronize', stream?.handle ?? null);
  }

  /** True when all work queued on `stream` has completed; false for CUDA_ERROR_NOT_READY. */
  streamQuery(stream: CudaStream | null): boolean {
    this.#callCount++;
    return this.#ready('cuStreamQuery', this.#calls.cuStreamQuery(stream?.handle ?? null));
  }

  /** Work queued on `stream` after this call waits for the event's latest record to complete. */
  streamWaitEvent(stream: CudaStream | null, event: CudaEvent): void {
    this.#call('cuStreamWaitEvent', stream?.handle ?? null, event.handle, 0);
  }

  eventCreate(flags = 0): CudaEvent {
    const e: unknown[] = [null];
    this.#call('cuEventCreate', e, flags);
    return { kind: 'event', handle: e[0] };
  }

  eventRecord(event: CudaEvent, stream: CudaStream | null): void {
    this.#call('cuEventRecord', event.handle, stream?.handle ?? null);
  }

  /** True when the event's latest record has completed (or it was never recorded). */
  eventQuery(event: CudaEvent): boolean {
    this.#callCount++;
    return this.#ready('cuEventQuery', this.#calls.cuEventQuery(event.handle));
  }

  eventSynchronize(event: CudaEvent): void {
    this.#call('cuEventSynchronize', event.handle);
  }

  eventDestroy(event: CudaEvent): void {
    this.#call('cuEventDestroy_v2', event.handle);
  }

  // ---- virtual memory management ----

  /**
   * The granularity in bytes that sizes, offsets and addresses of {@link memCreate}, {@link memMap} and
   * {@link memAddressReserve} must be multiples of on `device` (`recommended`: the size the driver suggests).
   */
  memGetAllocationGranularity(device: number, recommended = false): number {
    const g = [0];
    const option = recommended ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED : CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    this.#call('cuMemGetAllocationGranularity', g, allocationProp(device, false), option);
    return Number(g[0]);
  }

  /**
   * Reserves `bytes` (a multiple of the granularity) of device address space, aligned to `alignment` (a power of
   * two; 0: the granularity). Nothing is mapped there until {@link memMap}. Free with {@link memAddressFree}.
   */
  memAddressReserve(bytes: number, alignment = 0): bigint {
    const p = [0];
    this.#call('cuMemAddressReserve', p, bytes, alignment, 0n, 0n);
    return BigInt(p[0]!);
  }

  /** Gives back a whole reservation: `ptr` and `bytes` exactly as reserved; unmap its mappings first. */
  memAddressFree(ptr: bigint, bytes: number): void {
    this.#call('cuMemAddressFree', ptr, bytes);
  }

  /**
   * Creates `bytes` (a multiple of the granularity) of physical memory on `device`, counted against it until
   * released and unmapped. `shareable`: it can be exported as a POSIX file descriptor
   * ({@link memExportToShareableHandle}). CUDA_ERROR_OUT_OF_MEMORY when the device has no room.
   */
  memCreate(bytes: number, device: number, options: { shareable?: boolean } = {}): CudaMemHandle {
    const h = [0];
    this.#call('cuMemCreate', h, bytes, allocationProp(device, options.shareable ?? false), 0n);
    return { kind: 'memory', handle: BigInt(h[0]!) };
  }

  /** Releases the handle; the memory goes back to the device once every mapping of it is unmapped too. */
  memRelease(handle: CudaMemHandle): void {
    this.#call('cuMemRelease', handle.handle);
  }

  /**
   * Maps `bytes` of the physical allocation, from `offset`, at `ptr` inside a reservation. All three multiples of
   * the granularity (else CUDA_ERROR_INVALID_VALUE). The range is not accessible until {@link memSetAccess}.
   */
  memMap(ptr: bigint, bytes: number, handle: CudaMemHandle, offset = 0): void {
    this.#call('cuMemMap', ptr, bytes, offset, handle.handle, 0n);
  }

  /** Makes mapped `[ptr, ptr + bytes)` readable and writable from `device`. */
  memSetAccess(ptr: bigint, bytes: number, device: number): void {
    const desc = { location: { type: CU_MEM_LOCATION_TYPE_DEVICE, id: device }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    this.#call('cuMemSetAccess', ptr, bytes, [desc], 1);
  }

  /** Unmaps whole mappings covering exactly `[ptr, ptr + bytes)`; the address space stays reserved. */
  memUnmap(ptr: bigint, bytes: number): void {
    this.#call('cuMemUnmap', ptr, bytes);
  }

  /** A new file descriptor (the caller closes it) for a physical allocation created `shareable`. */
  memExportToShareableHandle(handle: CudaMemHandle): number {
    const fd = [0];
    this.#call('cuMemExportToShareableHandle', fd, handle.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0n);
    return fd[0]!;
  }

  /** A new handle to the memory behind an exported file descriptor (from this or another process); `fd` stays the caller's. */
  memImportFromShareableHandle(fd: number): CudaMemHandle {
    const h = [0];
    this.#call('cuMemImportFromShareableHandle', h, fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    return { kind: 'memory', handle: BigInt(h[0]!) };
  }

  /** Base and size of the allocation (or mapping) holding `ptr`; CUDA_ERROR_NOT_FOUND for memory the driver did not give. */
  memGetAddressRange(ptr: bigint): { base: bigint; bytes: number } {
    const base = [0];
    const bytes = [0];
    this.#call('cuMemGetAddressRange_v2', base, bytes, ptr);
    return { base: BigInt(base[0]!), bytes: Number(bytes[0]) };
  }

  // ---- legacy IPC ----

  /** The 64-byte handle of the {@link memAlloc} allocation holding `ptr` (for its base: send the offset along). */
  ipcGetMemHandle(ptr: bigint): Uint8Array {
    const handle = new Uint8Array(CUDA_IPC_HANDLE_BYTES);
    this.#call('cuIpcGetMemHandle', handle, ptr);
    return handle;
  }

  /**
   * Maps another process's allocation here and returns its base; close with {@link ipcCloseMemHandle}. Opening a
   * handle in the process that made it fails (CUDA_ERROR_INVALID_CONTEXT).
   */
  ipcOpenMemHandle(handle: Uint8Array): bigint {
    const p = [0];
    this.#call('cuIpcOpenMemHandle_v2', p, { reserved: ipcHandleBytes(handle) }, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    return BigInt(p[0]!);
  }

  ipcCloseMemHandle(ptr: bigint): void {
    this.#call('cuIpcCloseMemHandle', ptr);
  }

  /** The 64-byte handle of an event created with `INTERPROCESS | DISABLE_TIMING` (`CudaEventFlags`). */
  ipcGetEventHandle(event: CudaEvent): Uint8Array {
    const handle = new Uint8Array(CUDA_IPC_HANDLE_BYTES);
    this.#call('cuIpcGetEventHandle', handle, event.handle);
    return handle;
  }

  /** Another process's interprocess event: queries and waits here see its records there. */
  ipcOpenEventHandle(handle: Uint8Array): CudaEvent {
    const e: unknown[] = [null];
    this.#call('cuIpcOpenEventHandle', e, { reserved: ipcHandleBytes(handle) });
    return { kind: 'event', handle: e[0] };
  }

  #ready(call: DriverCallName, result: number): boolean {
    if (result === CudaResult.NOT_READY) return false;
    this.#check(call, result);
    return true;
  }

  /** Unloads the library; the driver must not be used afterwards. */
  unload(): void {
    this.#lib.unload();
  }
}
