// The other process of CudaDriverIpc.test.ts: opens the same libcuda (STOWAGE_LIBCUDA), reports `{ ready: true }`,
// then answers each request message with one reply. A file descriptor the parent passes sits at fd 4.
import type { CudaMemHandle } from '@stowage/allocator-cuda/driver';
import { CudaDriver, isCudaError } from '@stowage/allocator-cuda';

export type IpcChildRequest =
  | { op: 'mapImported'; fd: number; bytes: number; at: number; readBytes: number; write: number[] }
  | { op: 'openMem'; handle: number[]; offset: number; readBytes: number; write: number[] }
  | { op: 'waitEvent'; handle: number[] }
  | { op: 'exit' };

export type IpcChildReply =
  | { ok: true; read?: number[]; rangeBytes?: number; readyBefore?: boolean; waitedMs?: number; readyAfter?: boolean }
  | { ok: false; error: string; driverName?: string };

const driver = CudaDriver.open();
driver.init();
driver.setCurrentContext(driver.retainPrimaryContext(driver.device(0)));

function readAt(ptr: bigint, bytes: number): number[] {
  const out = new Uint8Array(bytes);
  driver.memcpyDtoH(out, ptr);
  return [...out];
}

function answer(request: IpcChildRequest): IpcChildReply {
  switch (request.op) {
    case 'mapImported': {
      const handle: CudaMemHandle = driver.memImportFromShareableHandle(request.fd);
      const va = driver.memAddressReserve(request.bytes);
      driver.memMap(va, request.bytes, handle);
      driver.memSetAccess(va, request.bytes, 0);
      const at = va + BigInt(request.at);
      const read = readAt(at, request.readBytes);
      driver.memcpyHtoD(at, Uint8Array.from(request.write));
      driver.memUnmap(va, request.bytes);
      driver.memAddressFree(va, request.bytes);
      driver.memRelease(handle);
      return { ok: true, read };
    }
    case 'openMem': {
      const base = driver.ipcOpenMemHandle(Uint8Array.from(request.handle));
      const at = base + BigInt(request.offset);
      const read = readAt(at, request.readBytes);
      driver.memcpyHtoD(at, Uint8Array.from(request.write));
      const rangeBytes = driver.memGetAddressRange(base).bytes;
      driver.ipcCloseMemHandle(base);
      return { ok: true, read, rangeBytes };
    }
    case 'waitEvent': {
      const event = driver.ipcOpenEventHandle(Uint8Array.from(request.handle));
      const readyBefore = driver.eventQuery(event);
      const start = performance.now();
      driver.eventSynchronize(event);
      const waitedMs = performance.now() - start;
      return { ok: true, readyBefore, waitedMs, readyAfter: driver.eventQuery(event) };
    }
    case 'exit':
      process.disconnect();
      return { ok: true };
  }
}

process.on('message', (request: IpcChildRequest) => {
  let reply: IpcChildReply;
  try {
    reply = answer(request);
  } catch (error) {
    reply = { ok: false, error: error instanceof Error ? error.message : String(error), ...(isCudaError(error) ? { driverName: error.driverName } : {}) };
  }
  if (process.connected) process.send!(reply);
});
process.send!({ ready: true });
