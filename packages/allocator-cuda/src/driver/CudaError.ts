import { DeviceError } from '@stowage/core';

/** What the driver said about a failed call. */
export interface CudaErrorDetails {
  /** The driver entry point that failed, e.g. `cuMemAlloc_v2`. */
  readonly call: string;
  /** The numeric `CUresult`. */
  readonly result: number;
  /** The driver's name for the result (`cuGetErrorName`), e.g. `CUDA_ERROR_OUT_OF_MEMORY`. */
  readonly driverName: string;
  /** The driver's description of the result (`cuGetErrorString`), e.g. `out of memory`. */
  readonly driverMessage: string;
}

/**
 * A CUDA driver call returned something other than `CUDA_SUCCESS`. The Stowage `code` is `DEVICE_ERROR`, as for
 * every device failure; the driver's own result is in {@link driverName} and {@link result}.
 */
export class CudaError extends DeviceError implements CudaErrorDetails {
  readonly call: string;
  readonly result: number;
  readonly driverName: string;
  readonly driverMessage: string;

  constructor(details: CudaErrorDetails, options?: ErrorOptions) {
    super(`${details.call} failed with ${details.driverName} (${details.result}): ${details.driverMessage}.`, options);
    this.call = details.call;
    this.result = details.result;
    this.driverName = details.driverName;
    this.driverMessage = details.driverMessage;
  }
}

/** True when `error` is a {@link CudaError}, optionally with the given driver name (`CUDA_ERROR_OUT_OF_MEMORY`). */
export function isCudaError(error: unknown, driverName?: string): error is CudaError {
  return error instanceof CudaError && (driverName === undefined || error.driverName === driverName);
}
