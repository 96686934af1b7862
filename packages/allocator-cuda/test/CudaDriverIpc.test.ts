import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { expect } from 'chai';
import type { CudaDriver } from '@stowage/allocator-cuda';
import { CudaError } from '@stowage/allocator-cuda';
import { CudaDeviceAttribute, CudaEventFlags, CudaResult } from '@stowage/allocator-cuda/driver';
import { InvalidArgumentError } from '@stowage/core';

import type { IpcChildReply, IpcChildRequest } from './CudaDriverIpcChild.js';
import type { TestDriver } from './testDriver.js';
import { openTestDriver, pattern, skipBecause, thrown } from './testDriver.js';

const MiB = 1 << 20;

/** A second process on the same libcuda, running CudaDriverIpcChild.js; `fd`, when given, becomes its fd 4. */
class ChildDriver {
  readonly #child: ChildProcess;
  readonly #replies: ((reply: IpcChildReply) => void)[] = [];
  readonly ready: Promise<void>;

  constructor(libraryPath: string, fd?: number) {
    const script = fileURLToPath(new URL('./CudaDriverIpcChild.js', import.meta.url));
    this.#child = spawn(process.execPath, [script], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: { ...process.env, STOWAGE_LIBCUDA: libraryPath },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc', fd ?? 'ignore'],
    });
    this.ready = new Promise((resolve, reject) => {
      this.#child.once('error', reject);
      this.#child.once('exit', (code) => reject(new Error(`the IPC child exited with ${code} before it was ready`)));
      this.#child.once('message', () => resolve());
    });
    void this.ready.then(() => this.#child.on('message', (reply: IpcChildReply) => this.#replies.shift()?.(reply)));
  }

  async request(request: IpcChildRequest): Promise<IpcChildReply & { ok: true }> {
    await this.ready;
    const reply = await new Promise<IpcChildReply>((resolve) => {
      this.#replies.push(resolve);
      this.#child.send(request);
    });
    if (!reply.ok) throw new Error(`the IPC child failed: ${reply.error}`);
    return reply;
  }

  kill(): void {
    this.#child.kill();
  }
}

describe('CudaDriver interprocess communication', function () {
  let t: TestDriver;
  let driver: CudaDriver;
  let child: ChildDriver | undefined;

  before(function () {
    const opened = openTestDriver();
    if (typeof opened === 'string') {
      console.log(`      skipped: ${opened}`);
      this.skip();
    }
    t = opened;
    driver = t.driver;
  });

  afterEach(function () {
    child?.kill();
    child = undefined;
  });

  function read(ptr: bigint, bytes: number): number[] {
    const out = new Uint8Array(bytes);
    driver.memcpyDtoH(out, ptr);
    return [...out];
  }

  describe('CudaDriver#memExportToShareableHandle', function () {
    it('lets another process import the allocation from the file descriptor and write what this one reads', async function () {
      if (driver.deviceAttribute(0, CudaDeviceAttribute.HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) !== 1) skipBecause(this, 'device 0 cannot export POSIX file descriptor handles');
      const granularity = driver.memGetAllocationGranularity(0);
      const handle = driver.memCreate(2 * granularity, 0, { shareable: true });
      const va = driver.memAddressReserve(2 * granularity);
      driver.memMap(va, 2 * granularity, handle);
      driver.memSetAccess(va, 2 * granularity, 0);
      const at = granularity + 4096;
      driver.memcpyHtoD(va + BigInt(at), pattern(256, 1));
      const fd = driver.memExportToShareableHandle(handle);
      child = new ChildDriver(driver.path, fd);
      await child.ready;
      closeSync(fd);
      const reply = await child.request({ op: 'mapImported', fd: 4, bytes: 2 * granularity, at, readBytes: 256, write: [...pattern(256, 2)] });
      expect(reply.read).to.deep.equal([...pattern(256, 1)]);
      expect(read(va + BigInt(at), 256)).to.deep.equal([...pattern(256, 2)]);
      driver.memUnmap(va, 2 * granularity);
      driver.memAddressFree(va, 2 * granularity);
      driver.memRelease(handle);
    });
  });

  describe('CudaDriver#ipcGetMemHandle and #ipcOpenMemHandle', function () {
    it('lets another process open the whole allocation, read what this one wrote at an offset, and write back', async function () {
      const bytes = 3 * MiB;
      const ptr = driver.memAlloc(bytes);
      const offset = MiB + 123;
      driver.memcpyHtoD(ptr + BigInt(offset), pattern(512, 3));
      const handle = driver.ipcGetMemHandle(ptr + BigInt(offset));
      expect(handle).to.be.instanceOf(Uint8Array).with.lengthOf(64);
      expect([...driver.ipcGetMemHandle(ptr)]).to.deep.equal([...handle]); // the handle names the allocation's base
      child = new ChildDriver(driver.path);
      const reply = await child.request({ op: 'openMem', handle: [...handle], offset, readBytes: 512, write: [...pattern(512, 4)] });
      expect(reply.read).to.deep.equal([...pattern(512, 3)]);
      expect(reply.rangeBytes).to.equal(bytes);
      expect(read(ptr + BigInt(offset), 512)).to.deep.equal([...pattern(512, 4)]);
      driver.memFree(ptr);
    });

    it('refuses to open a handle in the process that made it with CUDA_ERROR_INVALID_CONTEXT', function () {
      const ptr = driver.memAlloc(MiB);
      const error = thrown(() => driver.ipcOpenMemHandle(driver.ipcGetMemHandle(ptr)));
      expect(error).to.be.instanceOf(CudaError);
      expect(error).to.include({ call: 'cuIpcOpenMemHandle_v2', result: CudaResult.INVALID_CONTEXT, driverName: 'CUDA_ERROR_INVALID_CONTEXT', driverMessage: 'invalid device context' });
      driver.memFree(ptr);
    });

    it('rejects a pointer that is not cuMemAlloc memory', function () {
      const pinned = driver.memHostAlloc(4096);
      expect(thrown(() => driver.ipcGetMemHandle(pinned.address))).to.be.instanceOf(CudaError).and.include({ call: 'cuIpcGetMemHandle' });
      driver.memFreeHost(pinned.address);
    });

    it('rejects a handle that names nothing with CUDA_ERROR_INVALID_HANDLE, and one of the wrong length before calling the driver', function () {
      if (t.hooks === null) skipBecause(this, "the real driver's answer to a garbage handle is not documented; this checks the stand-in's");
      expect(thrown(() => driver.ipcOpenMemHandle(new Uint8Array(64)))).to.include({ call: 'cuIpcOpenMemHandle_v2', driverName: 'CUDA_ERROR_INVALID_HANDLE' });
      const calls = driver.callCount;
      expect(thrown(() => driver.ipcOpenMemHandle(new Uint8Array(63)))).to.be.instanceOf(InvalidArgumentError);
      expect(driver.callCount).to.equal(calls);
    });

    it('rejects closing a pointer that was not opened', function () {
      const ptr = driver.memAlloc(MiB);
      const error = thrown(() => driver.ipcCloseMemHandle(ptr));
      expect(error).to.be.instanceOf(CudaError).and.include({ call: 'cuIpcCloseMemHandle' });
      if (t.hooks !== null) expect(error).to.include({ driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memFree(ptr);
    });
  });

  describe('CudaDriver#ipcGetEventHandle and #ipcOpenEventHandle', function () {
    it('makes another process wait in eventSynchronize for a record behind a delayed stream here', async function () {
      const h = t.hooks;
      if (h === null) skipBecause(this, "needs the stand-in's standinDelayStream hook; running on a real driver");
      const event = driver.eventCreate(CudaEventFlags.INTERPROCESS | CudaEventFlags.DISABLE_TIMING);
      const handle = driver.ipcGetEventHandle(event);
      child = new ChildDriver(driver.path);
      await child.ready;
      const stream = driver.streamCreate(1);
      h.delayStream(stream, 600_000);
      driver.eventRecord(event, stream);
      const reply = await child.request({ op: 'waitEvent', handle: [...handle] });
      expect(reply.readyBefore).to.equal(false);
      expect(reply.waitedMs).to.be.greaterThan(100);
      expect(reply.readyAfter).to.equal(true);
      expect(driver.eventQuery(event)).to.equal(true);
      driver.streamDestroy(stream);
      driver.eventDestroy(event);
    });

    it('refuses an interprocess event without DISABLE_TIMING with CUDA_ERROR_INVALID_VALUE', function () {
      expect(thrown(() => driver.eventCreate(CudaEventFlags.INTERPROCESS))).to.include({ call: 'cuEventCreate', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });

    it('refuses a handle for an event not created INTERPROCESS', function () {
      const event = driver.eventCreate(CudaEventFlags.DISABLE_TIMING);
      expect(thrown(() => driver.ipcGetEventHandle(event))).to.be.instanceOf(CudaError).and.include({ call: 'cuIpcGetEventHandle' });
      driver.eventDestroy(event);
    });

    it('refuses to open an event handle in the process that made it with CUDA_ERROR_INVALID_CONTEXT', function () {
      if (t.hooks === null) skipBecause(this, "event handles opened in their own process: the stand-in's choice (Note [Opening a handle in its own process])");
      const event = driver.eventCreate(CudaEventFlags.INTERPROCESS | CudaEventFlags.DISABLE_TIMING);
      expect(thrown(() => driver.ipcOpenEventHandle(driver.ipcGetEventHandle(event)))).to.include({ call: 'cuIpcOpenEventHandle', driverName: 'CUDA_ERROR_INVALID_CONTEXT' });
      driver.eventDestroy(event);
    });
  });
});
