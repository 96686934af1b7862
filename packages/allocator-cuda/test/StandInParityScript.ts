// One side of StandInParity.test.ts: runs the same calls on the libcuda named by STOWAGE_LIBCUDA and prints, as one
// JSON line, what each gave: a normalized value, or the driver's error name. Values that differ between devices by
// nature (addresses, capacities, names) are reduced to what must agree (alignment, equality, sign).
import { CudaDriver, isCudaError } from '@stowage/allocator-cuda';
import { CudaEventFlags } from '@stowage/allocator-cuda/driver';

const MiB = 2 ** 20;
const outcomes: [string, unknown, string?][] = [];

/**
 * Runs one step of the script. `stricter` marks a call whose use CUDA's documentation rules out but a driver may
 * tolerate: the stand-in refuses it on purpose, so that Stowage's tests catch the misuse, and the comparison accepts a
 * driver that answers 'ok' there (the reason says what the driver was seen to do).
 */
function step(name: string, fn: () => unknown, stricter?: string): void {
  let outcome: unknown;
  try {
    outcome = fn() ?? 'ok';
  } catch (error) {
    outcome = isCudaError(error) ? error.driverName : `not a CudaError: ${error instanceof Error ? error.constructor.name : typeof error}`;
  }
  outcomes.push(stricter === undefined ? [name, outcome] : [name, outcome, stricter]);
}

const driver = CudaDriver.open({ paths: [process.env['STOWAGE_LIBCUDA']!] });
step('cuDeviceGetCount before cuInit', () => driver.deviceCount());
driver.init();
const device = driver.device(0);
driver.setCurrentContext(driver.retainPrimaryContext(device));

step('cuDeviceGet out of range', () => driver.device(4096));
step('cuDeviceGetAttribute VMM supported', () => driver.deviceAttribute(device, 102));
step('cuMemGetInfo total equals cuDeviceTotalMem', () => driver.memInfo().totalBytes === driver.deviceTotalBytes(device));
step('cuMemAlloc of 0 bytes', () => driver.memAlloc(0));
const p = driver.memAlloc(MiB);
step('cuMemAlloc alignment ≥ 256', () => p % 256n === 0n);
step('copy round trip', () => {
  const bytes = Uint8Array.from({ length: MiB }, (_, i) => (i * 7) & 0xff);
  driver.memcpyHtoD(p, bytes);
  const back = new Uint8Array(MiB);
  driver.memcpyDtoH(back, p);
  return Buffer.from(back).equals(Buffer.from(bytes));
});
step('cuMemGetAddressRange inside an allocation: its base', () => driver.memGetAddressRange(p + 100n).base === p);
step('cuMemGetAddressRange inside an allocation: at least its size', () => driver.memGetAddressRange(p + 100n).bytes >= MiB);
step('cuIpcGetMemHandle of an allocation', () => driver.ipcGetMemHandle(p).byteLength);
step('cuIpcOpenMemHandle in the exporting process', () => driver.ipcOpenMemHandle(driver.ipcGetMemHandle(p)));
step('cuMemFree', () => driver.memFree(p));
step('cuMemFree twice', () => driver.memFree(p));

const granularity = driver.memGetAllocationGranularity(device);
step('cuMemGetAllocationGranularity (minimum)', () => granularity);
step('cuMemCreate of half the granularity', () => driver.memCreate(granularity / 2, device));
step('VMM round trip and partial unmap', () => {
  const va = driver.memAddressReserve(2 * granularity, granularity);
  const handle = driver.memCreate(2 * granularity, device, { shareable: true });
  driver.memMap(va, 2 * granularity, handle);
  driver.memSetAccess(va, 2 * granularity, device);
  driver.memcpyHtoD(va + BigInt(granularity), Uint8Array.of(1, 2, 3));
  const back = new Uint8Array(3);
  driver.memcpyDtoH(back, va + BigInt(granularity));
  let partial = 'ok';
  try {
    driver.memUnmap(va, granularity);
  } catch (error) {
    partial = isCudaError(error) ? error.driverName : 'other';
  }
  driver.memUnmap(va, 2 * granularity);
  driver.memRelease(handle);
  let second = 'ok';
  try {
    driver.memRelease(handle);
  } catch (error) {
    second = isCudaError(error) ? error.driverName : 'other';
  }
  driver.memAddressFree(va, 2 * granularity);
  return { read: [...back], partialUnmap: partial, releaseTwice: second };
});
step('cuMemGetAllocationGranularity of a device index past the count', () => driver.memGetAllocationGranularity(driver.deviceCount()) === granularity);
/** What cuMemMap answers for `bytes` of a two-page allocation at `offset`, `pagesIn` pages into a four-page reservation. */
function mapOutcome(bytes: number, offset: number, pagesIn: number, misalign = 0): unknown {
  const va = driver.memAddressReserve(4 * granularity, granularity);
  const handle = driver.memCreate(2 * granularity, device);
  const at = va + BigInt(pagesIn * granularity + misalign);
  try {
    driver.memMap(at, bytes, handle, offset);
    driver.memUnmap(at, bytes);
    return 'ok';
  } finally {
    driver.memRelease(handle);
    driver.memAddressFree(va, 4 * granularity);
  }
}
step('cuMemMap at a non-zero offset into the allocation', () => mapOutcome(granularity, granularity, 0));
step('cuMemMap of half an allocation', () => mapOutcome(granularity, 0, 0));
step('cuMemMap of more than the allocation', () => mapOutcome(4 * granularity, 0, 0));
step('cuMemMap at an address off the granularity', () => mapOutcome(2 * granularity, 0, 1, 4096));
step('cuMemMap past the end of its reservation', () => mapOutcome(2 * granularity, 0, 3), 'the documentation asks for a reserved range; driver 580.159.04 on an H200 answered ok');
step('cuMemUnmap of a reserved range that holds no mapping', () => {
  const va = driver.memAddressReserve(2 * granularity, granularity);
  try {
    return driver.memUnmap(va, granularity);
  } finally {
    driver.memAddressFree(va, 2 * granularity);
  }
});
step('cuMemExportToShareableHandle of an allocation made without the handle type', () => {
  const handle = driver.memCreate(granularity, device);
  try {
    return driver.memExportToShareableHandle(handle);
  } finally {
    driver.memRelease(handle);
  }
});
step('events: record, synchronize, query', () => {
  const stream = driver.streamCreate(1);
  const event = driver.eventCreate(CudaEventFlags.DISABLE_TIMING);
  driver.eventRecord(event, stream);
  driver.eventSynchronize(event);
  const ready = driver.eventQuery(event) && driver.streamQuery(stream) && driver.streamQuery(null);
  driver.eventDestroy(event);
  driver.streamDestroy(stream);
  return ready;
});
step('cuEventCreate interprocess with timing', () => driver.eventCreate(CudaEventFlags.INTERPROCESS));
step('cuGetErrorName / cuGetErrorString of 2', () => [driver.errorName(2), driver.errorString(2)]);
step('cuGetErrorName of 100000', () => driver.errorName(100000));
process.stdout.write(`${JSON.stringify(outcomes, (_, v: unknown) => (typeof v === 'bigint' ? 'a pointer' : v))}\n`);
