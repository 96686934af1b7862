import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { expect } from 'chai';
import { CudaDriver, CudaError, isCudaError } from '@stowage/allocator-cuda';
import { CudaDeviceAttribute, CudaResult } from '@stowage/allocator-cuda/driver';
import type { StandInHooks } from '@stowage/allocator-cuda/testing';
import { BackendUnavailableError, DeviceError, isStowageError } from '@stowage/core';

import type { TestDriver } from './testDriver.js';
import { openTestDriver, pattern, standInHooks, thrown } from './testDriver.js';

const MiB = 1 << 20;

describe('CudaDriver', function () {
  let t: TestDriver;
  let driver: CudaDriver;

  before(function () {
    const opened = openTestDriver();
    if (typeof opened === 'string') {
      console.log(`      skipped: ${opened}`);
      this.skip();
    }
    t = opened;
    driver = t.driver;
  });

  /** The stand-in's hooks; skips the test, saying so, on a real driver. */
  function hooks(ctx: Mocha.Context): StandInHooks {
    return standInHooks(ctx, t);
  }

  describe('CudaDriver.open', function () {
    it('throws BackendUnavailableError naming every path tried when no library loads', function () {
      const paths = ['/nonexistent/libcuda.so.1', 'libcuda-missing.so.9'];
      const error = thrown(() => CudaDriver.open({ paths }));
      expect(error).to.be.instanceOf(BackendUnavailableError);
      expect(isStowageError(error, 'BACKEND_UNAVAILABLE')).to.equal(true);
      for (const path of paths) expect((error as Error).message).to.contain(path);
      expect((error as Error).message).to.contain('STOWAGE_LIBCUDA');
    });

    it('refuses a library that lacks the driver symbols', function () {
      const error = thrown(() => CudaDriver.open({ paths: ['libc.so.6'] }));
      expect(error).to.be.instanceOf(BackendUnavailableError);
      expect((error as Error).message).to.match(/libc\.so\.6: not a CUDA driver/);
    });
  });

  describe('#init and device queries', function () {
    it('reports a driver version, at least one device, its name, attributes and total memory', function () {
      expect(driver.driverVersion()).to.be.greaterThan(0);
      expect(driver.deviceCount()).to.be.at.least(1);
      const device = driver.device(0);
      expect(driver.deviceName(device)).to.be.a('string').and.not.equal('');
      expect(driver.deviceAttribute(device, CudaDeviceAttribute.WARP_SIZE)).to.equal(32);
      expect(driver.deviceAttribute(device, CudaDeviceAttribute.COMPUTE_CAPABILITY_MAJOR)).to.be.at.least(1);
      expect(driver.deviceTotalBytes(device)).to.be.greaterThan(0);
      expect(driver.hasCurrentContext()).to.equal(true);
    });

    it('turns an invalid device ordinal into CUDA_ERROR_INVALID_DEVICE', function () {
      const error = thrown(() => driver.device(driver.deviceCount()));
      expect(error).to.be.instanceOf(CudaError).and.instanceOf(DeviceError);
      expect(error).to.include({ call: 'cuDeviceGet', result: CudaResult.INVALID_DEVICE, driverName: 'CUDA_ERROR_INVALID_DEVICE', driverMessage: 'invalid device ordinal' });
      expect(isStowageError(error, 'DEVICE_ERROR')).to.equal(true);
      expect((error as Error).message).to.equal('cuDeviceGet failed with CUDA_ERROR_INVALID_DEVICE (101): invalid device ordinal.');
    });

    it('fails calls with CUDA_ERROR_NOT_INITIALIZED before cuInit (in a fresh process, opened through STOWAGE_LIBCUDA)', function () {
      const script = [
        "import { CudaDriver } from '@stowage/allocator-cuda';",
        'const driver = CudaDriver.open();',
        'try { driver.deviceCount(); console.log("no error"); }',
        'catch (e) { console.log(JSON.stringify({ call: e.call, driverName: e.driverName, driverMessage: e.driverMessage })); }',
      ].join('\n');
      const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
        cwd: fileURLToPath(new URL('..', import.meta.url)),
        env: { ...process.env, STOWAGE_LIBCUDA: driver.path },
        encoding: 'utf8',
      });
      expect(run.stderr).to.equal('');
      expect(JSON.parse(run.stdout)).to.deep.equal({ call: 'cuDeviceGetCount', driverName: 'CUDA_ERROR_NOT_INITIALIZED', driverMessage: 'initialization error' });
    });
  });

  describe('#memAlloc and #memFree', function () {
    it('takes room from the device and gives it back, as cuMemGetInfo_v2 reports', function () {
      const before = driver.memInfo();
      const ptr = driver.memAlloc(4 * MiB);
      expect(ptr).to.be.a('bigint').and.not.equal(0n);
      expect(driver.memInfo().freeBytes).to.be.at.most(before.freeBytes - 4 * MiB);
      driver.memFree(ptr);
      expect(driver.memInfo().freeBytes).to.equal(before.freeBytes);
    });

    it('fails with CUDA_ERROR_OUT_OF_MEMORY past the capacity and keeps working afterwards', function () {
      const h = hooks(this);
      const total = driver.memInfo().totalBytes;
      h.setCapacity(64 * MiB);
      try {
        const held = driver.memAlloc(48 * MiB);
        const error = thrown(() => driver.memAlloc(32 * MiB));
        expect(isCudaError(error, 'CUDA_ERROR_OUT_OF_MEMORY')).to.equal(true);
        expect(error).to.include({ call: 'cuMemAlloc_v2', result: CudaResult.OUT_OF_MEMORY, driverMessage: 'out of memory' });
        driver.memFree(held);
        driver.memFree(driver.memAlloc(32 * MiB));
      } finally {
        h.setCapacity(total);
      }
    });

    it('rejects a zero-byte allocation and a pointer it never returned with CUDA_ERROR_INVALID_VALUE', function () {
      expect(thrown(() => driver.memAlloc(0))).to.include({ driverName: 'CUDA_ERROR_INVALID_VALUE', driverMessage: 'invalid argument' });
      const ptr = driver.memAlloc(1024);
      driver.memFree(ptr);
      expect(thrown(() => driver.memFree(ptr))).to.include({ call: 'cuMemFree_v2', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });

    it('fails with CUDA_ERROR_INVALID_CONTEXT when no context is current', function () {
      driver.setCurrentContext(null);
      try {
        expect(driver.hasCurrentContext()).to.equal(false);
        expect(thrown(() => driver.memAlloc(1024))).to.include({ driverName: 'CUDA_ERROR_INVALID_CONTEXT', driverMessage: 'invalid device context' });
      } finally {
        driver.setCurrentContext(t.context);
      }
    });

    it('leaves the next call working after an injected failure mid-sequence', function () {
      const h = hooks(this);
      const first = driver.memAlloc(MiB);
      h.injectError('cuMemAlloc_v2', CudaResult.UNKNOWN, 1);
      const second = driver.memAlloc(MiB);
      expect(thrown(() => driver.memAlloc(MiB))).to.include({ call: 'cuMemAlloc_v2', driverName: 'CUDA_ERROR_UNKNOWN', driverMessage: 'unknown error' });
      const third = driver.memAlloc(MiB);
      for (const p of [first, second, third]) driver.memFree(p);
    });
  });

  describe('#memcpyHtoD, #memcpyDtoD and #memcpyDtoH', function () {
    it('round-trips bytes host → device → device → host', function () {
      const bytes = pattern(MiB + 3, 7);
      const a = driver.memAlloc(bytes.length);
      const b = driver.memAlloc(bytes.length);
      driver.memcpyHtoD(a, bytes);
      driver.memcpyDtoD(b, a, bytes.length);
      const back = new Uint8Array(bytes.length);
      driver.memcpyDtoH(back, b);
      expect(Buffer.from(back).equals(Buffer.from(bytes))).to.equal(true);
      driver.memFree(a);
      driver.memFree(b);
    });

    it('rejects a copy past the end of an allocation with CUDA_ERROR_INVALID_VALUE', function () {
      hooks(this); // the real driver may accept an overrun inside its own mapping
      const a = driver.memAlloc(256);
      expect(thrown(() => driver.memcpyHtoD(a, new Uint8Array(512)))).to.include({ call: 'cuMemcpyHtoD_v2', driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memFree(a);
    });
  });

  describe('streams and events', function () {
    const bytes = 64 * 1024;

    /** A device buffer holding `old`, a pinned host buffer holding `fresh`, and a pinned buffer to read into. */
    function setUp() {
      const device = driver.memAlloc(bytes);
      driver.memcpyHtoD(device, pattern(bytes, 1));
      const source = driver.memHostAlloc(bytes);
      const target = driver.memHostAlloc(bytes);
      source.bytes.set(pattern(bytes, 2));
      const free = () => {
        driver.memFree(device);
        driver.memFreeHost(source.address);
        driver.memFreeHost(target.address);
      };
      return { device, source: source.address, target: target.address, read: () => target.bytes.slice(), free };
    }

    it('orders a reader stream after a slow writer stream through an event and cuStreamWaitEvent', function () {
      const h = hooks(this);
      const { device, source, target, read, free } = setUp();
      const writer = driver.streamCreate(1);
      const reader = driver.streamCreate(1);
      const written = driver.eventCreate();
      h.delayStream(writer, 100_000);
      driver.memcpyHtoDAsync(device, source, bytes, writer);
      driver.eventRecord(written, writer);
      expect(driver.eventQuery(written)).to.equal(false);
      driver.streamWaitEvent(reader, written);
      driver.memcpyDtoHAsync(target, device, bytes, reader);
      expect(driver.streamQuery(reader)).to.equal(false);
      driver.streamSynchronize(reader);
      expect(driver.eventQuery(written)).to.equal(true);
      expect(Buffer.from(read()).equals(Buffer.from(pattern(bytes, 2)))).to.equal(true);
      driver.eventDestroy(written);
      driver.streamDestroy(writer);
      driver.streamDestroy(reader);
      free();
    });

    it('reads the old bytes when the reader does not wait for the writer event', function () {
      const h = hooks(this);
      const { device, source, target, read, free } = setUp();
      const writer = driver.streamCreate(1);
      const reader = driver.streamCreate(1);
      h.delayStream(writer, 100_000);
      driver.memcpyHtoDAsync(device, source, bytes, writer);
      driver.memcpyDtoHAsync(target, device, bytes, reader);
      driver.streamSynchronize(reader);
      expect(Buffer.from(read()).equals(Buffer.from(pattern(bytes, 1)))).to.equal(true);
      driver.streamSynchronize(writer);
      driver.streamDestroy(writer);
      driver.streamDestroy(reader);
      free();
    });

    it('completes an event only when its stream reaches the record, and eventSynchronize waits for it', function () {
      const h = hooks(this);
      const stream = driver.streamCreate();
      const event = driver.eventCreate();
      expect(driver.eventQuery(event)).to.equal(true);
      h.delayStream(stream, 50_000);
      driver.eventRecord(event, stream);
      expect(driver.eventQuery(event)).to.equal(false);
      driver.eventSynchronize(event);
      expect(driver.eventQuery(event)).to.equal(true);
      expect(driver.streamQuery(stream)).to.equal(true);
      driver.eventDestroy(event);
      driver.streamDestroy(stream);
    });

    it('finds a stream idle as soon as the event recorded last on it has completed, every time', function () {
      const stream = driver.streamCreate(1);
      const event = driver.eventCreate(2);
      let busy = 0;
      for (let i = 0; i < 500; i++) {
        driver.eventRecord(event, stream);
        driver.eventSynchronize(event);
        if (!driver.streamQuery(stream)) busy++;
      }
      expect(busy, 'queries that found the stream busy after its last event completed').to.equal(0);
      driver.eventDestroy(event);
      driver.streamDestroy(stream);
    });

    it('turns a destroyed stream or event into CUDA_ERROR_INVALID_HANDLE', function () {
      hooks(this); // the real driver's behaviour on a destroyed handle is undefined
      const stream = driver.streamCreate();
      const event = driver.eventCreate();
      driver.streamDestroy(stream);
      driver.eventDestroy(event);
      expect(thrown(() => driver.streamSynchronize(stream))).to.include({ call: 'cuStreamSynchronize', driverName: 'CUDA_ERROR_INVALID_HANDLE', driverMessage: 'invalid resource handle' });
      expect(thrown(() => driver.eventQuery(event))).to.include({ call: 'cuEventQuery', driverName: 'CUDA_ERROR_INVALID_HANDLE' });
    });
  });

  describe('#memHostAlloc', function () {
    it('returns pinned memory, viewable from JavaScript and copyable by address, that does not count against the device', function () {
      const before = driver.memInfo().freeBytes;
      const p = driver.memHostAlloc(MiB);
      expect(p.address).to.be.a('bigint').and.not.equal(0n);
      p.bytes.fill(9);
      const device = driver.memAlloc(MiB);
      driver.memcpyHtoDAsync(device, p.address, MiB, null);
      const back = new Uint8Array(MiB);
      driver.memcpyDtoH(back, device);
      expect(back.every((b) => b === 9)).to.equal(true);
      driver.memFree(device);
      if (t.hooks !== null) expect(driver.memInfo().freeBytes).to.equal(before);
      driver.memFreeHost(p.address);
    });
  });

  describe('devices and their contexts', function () {
    it('gives each device its own capacity, and cuMemGetInfo_v2 reports the current context\'s device', function () {
      const h = hooks(this);
      expect(driver.deviceCount()).to.be.at.least(2);
      const total = driver.deviceTotalBytes(0);
      const other = driver.retainPrimaryContext(driver.device(1));
      h.setDeviceCapacity(1, 256 * MiB);
      try {
        driver.setCurrentContext(other);
        expect(driver.memInfo()).to.deep.equal({ freeBytes: 256 * MiB, totalBytes: 256 * MiB });
        const ptr = driver.memAlloc(64 * MiB);
        expect(driver.memInfo().freeBytes).to.equal(192 * MiB);
        expect(thrown(() => driver.memAlloc(200 * MiB))).to.include({ driverName: 'CUDA_ERROR_OUT_OF_MEMORY' });
        driver.setCurrentContext(t.context);
        expect(driver.memInfo()).to.deep.equal({ freeBytes: total, totalBytes: total });
        driver.setCurrentContext(other);
        driver.memFree(ptr);
      } finally {
        driver.setCurrentContext(t.context);
        h.setDeviceCapacity(1, total);
        driver.releasePrimaryContext(1);
      }
    });

    it('takes the device count from STOWAGE_CUDA_STANDIN_DEVICES (in a fresh process)', function () {
      hooks(this);
      const script = [
        "import { CudaDriver } from '@stowage/allocator-cuda';",
        'const driver = CudaDriver.open();',
        'driver.init();',
        'console.log(driver.deviceCount());',
      ].join('\n');
      const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
        cwd: fileURLToPath(new URL('..', import.meta.url)),
        env: { ...process.env, STOWAGE_LIBCUDA: driver.path, STOWAGE_CUDA_STANDIN_DEVICES: '3' },
        encoding: 'utf8',
      });
      expect(run.stderr).to.equal('');
      expect(run.stdout.trim()).to.equal('3');
    });
  });

  describe('#callCount', function () {
    it('counts one per driver call made through a method, failed ones included, and none for the error texts', function () {
      const before = driver.callCount;
      driver.memFree(driver.memAlloc(1024));
      driver.streamQuery(null);
      thrown(() => driver.memAlloc(0));
      expect(driver.callCount).to.equal(before + 4);
      driver.errorName(CudaResult.OUT_OF_MEMORY);
      driver.errorString(CudaResult.OUT_OF_MEMORY);
      expect(driver.callCount).to.equal(before + 4);
    });
  });

  describe('#errorName and #errorString', function () {
    it('gives the driver name and message of a result', function () {
      expect(driver.errorName(CudaResult.OUT_OF_MEMORY)).to.equal('CUDA_ERROR_OUT_OF_MEMORY');
      expect(driver.errorString(CudaResult.OUT_OF_MEMORY)).to.equal('out of memory');
      expect(driver.errorName(123456)).to.equal('CUresult 123456');
    });
  });
});
