import { closeSync } from 'node:fs';

import { expect } from 'chai';
import type { CudaDriver } from '@stowage/allocator-cuda';
import { CudaError } from '@stowage/allocator-cuda';
import { CudaDeviceAttribute, CudaResult } from '@stowage/allocator-cuda/driver';
import type { StandInHooks } from '@stowage/allocator-cuda/testing';

import type { TestDriver } from './testDriver.js';
import { openTestDriver, pattern, standInHooks, thrown } from './testDriver.js';

const MiB = 1 << 20;
const GiB = 1024 * MiB;

describe('CudaDriver virtual memory management', function () {
  let t: TestDriver;
  let driver: CudaDriver;
  let granularity: number;

  before(function () {
    const opened = openTestDriver();
    if (typeof opened === 'string') {
      console.log(`      skipped: ${opened}`);
      this.skip();
    }
    t = opened;
    driver = t.driver;
    if (driver.deviceAttribute(0, CudaDeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) !== 1) {
      console.log('      skipped: device 0 does not support virtual memory management');
      this.skip();
    }
    granularity = driver.memGetAllocationGranularity(0);
  });

  /** The stand-in's hooks; skips the test, saying so, on a real driver. */
  function hooks(ctx: Mocha.Context): StandInHooks {
    return standInHooks(ctx, t);
  }

  function read(ptr: bigint, bytes: number): Buffer {
    const out = new Uint8Array(bytes);
    driver.memcpyDtoH(out, ptr);
    return Buffer.from(out);
  }

  describe('CudaDriver#memGetAllocationGranularity', function () {
    it('gives a power of two of at least 2 MiB, the recommended one a multiple of the minimum', function () {
      expect(granularity).to.be.at.least(2 * MiB);
      expect(granularity & (granularity - 1)).to.equal(0);
      expect(driver.memGetAllocationGranularity(0, true) % granularity).to.equal(0);
    });

    it('is exactly 2 MiB, minimum and recommended, on the stand-in', function () {
      hooks(this);
      expect(granularity).to.equal(2 * MiB);
      expect(driver.memGetAllocationGranularity(0, true)).to.equal(2 * MiB);
    });

    it('answers for a device index past the count without an error, as the driver does', function () {
      expect(driver.memGetAllocationGranularity(driver.deviceCount())).to.equal(granularity);
    });
  });

  describe('CudaDriver#memAddressReserve', function () {
    it('honours the alignment asked for', function () {
      const alignment = 16 * granularity;
      const ptr = driver.memAddressReserve(granularity, alignment);
      expect(Number(ptr % BigInt(alignment))).to.equal(0);
      driver.memAddressFree(ptr, granularity);
    });

    it('rejects a size that is not a multiple of the granularity with CUDA_ERROR_INVALID_VALUE', function () {
      expect(thrown(() => driver.memAddressReserve(granularity + 4096))).to.include({ call: 'cuMemAddressReserve', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });

    it('rejects an alignment that is not a power of two with CUDA_ERROR_INVALID_VALUE', function () {
      expect(thrown(() => driver.memAddressReserve(granularity, 3 * granularity))).to.include({ call: 'cuMemAddressReserve', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });

    it('frees only a whole reservation', function () {
      hooks(this); // the driver's answer to a partial free is not documented
      const ptr = driver.memAddressReserve(2 * granularity);
      expect(thrown(() => driver.memAddressFree(ptr, granularity))).to.include({ call: 'cuMemAddressFree', driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memAddressFree(ptr, 2 * granularity);
    });
  });

  describe('CudaDriver#memMap', function () {
    it('shows the same bytes through two mappings of one physical allocation', function () {
      const handle = driver.memCreate(2 * granularity, 0);
      const a = driver.memAddressReserve(2 * granularity);
      const b = driver.memAddressReserve(4 * granularity);
      const bAt = b + BigInt(granularity);
      driver.memMap(a, 2 * granularity, handle);
      driver.memMap(bAt, 2 * granularity, handle);
      driver.memSetAccess(a, 2 * granularity, 0);
      driver.memSetAccess(bAt, 2 * granularity, 0);
      const bytes = pattern(MiB, 3);
      driver.memcpyHtoD(a + BigInt(granularity) + 100n, bytes);
      expect(read(bAt + BigInt(granularity) + 100n, bytes.length).equals(Buffer.from(bytes))).to.equal(true);
      driver.memcpyHtoD(bAt, pattern(64, 9));
      expect(read(a, 64).equals(Buffer.from(pattern(64, 9)))).to.equal(true);
      driver.memUnmap(a, 2 * granularity);
      driver.memUnmap(bAt, 2 * granularity);
      driver.memRelease(handle);
      driver.memAddressFree(a, 2 * granularity);
      driver.memAddressFree(b, 4 * granularity);
    });

    it('copies across adjacent mappings of different allocations as one range', function () {
      const first = driver.memCreate(granularity, 0);
      const second = driver.memCreate(granularity, 0);
      const va = driver.memAddressReserve(2 * granularity);
      driver.memMap(va, granularity, first);
      driver.memMap(va + BigInt(granularity), granularity, second);
      driver.memSetAccess(va, 2 * granularity, 0);
      const bytes = pattern(4096, 5);
      const straddling = va + BigInt(granularity - 2048);
      driver.memcpyHtoD(straddling, bytes);
      expect(read(straddling, bytes.length).equals(Buffer.from(bytes))).to.equal(true);
      driver.memUnmap(va, 2 * granularity);
      driver.memRelease(first);
      driver.memRelease(second);
      driver.memAddressFree(va, 2 * granularity);
    });

    it('refuses to map part of an allocation, or from a non-zero offset, with CUDA_ERROR_NOT_SUPPORTED, as the driver does', function () {
      const handle = driver.memCreate(2 * granularity, 0);
      const va = driver.memAddressReserve(2 * granularity);
      const unsupported = { call: 'cuMemMap', driverName: 'CUDA_ERROR_NOT_SUPPORTED' };
      expect(thrown(() => driver.memMap(va, granularity / 2, handle))).to.include(unsupported);
      expect(thrown(() => driver.memMap(va, granularity, handle, granularity))).to.include(unsupported);
      driver.memRelease(handle);
      driver.memAddressFree(va, 2 * granularity);
    });

    it('rejects an address off the granularity with CUDA_ERROR_INVALID_VALUE', function () {
      hooks(this); // the real driver's answer is compared in StandInParity, not asserted here
      const handle = driver.memCreate(granularity, 0);
      const va = driver.memAddressReserve(2 * granularity);
      expect(thrown(() => driver.memMap(va + 4096n, granularity, handle))).to.include({ call: 'cuMemMap', driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memRelease(handle);
      driver.memAddressFree(va, 2 * granularity);
    });

    it('refuses a copy into a mapping before memSetAccess', function () {
      hooks(this); // the real driver faults on the device instead
      const handle = driver.memCreate(granularity, 0);
      const va = driver.memAddressReserve(granularity);
      driver.memMap(va, granularity, handle);
      expect(thrown(() => driver.memcpyHtoD(va, new Uint8Array(16)))).to.include({ call: 'cuMemcpyHtoD_v2', driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memSetAccess(va, granularity, 0);
      driver.memcpyHtoD(va, new Uint8Array(16));
      driver.memUnmap(va, granularity);
      expect(thrown(() => driver.memcpyHtoD(va, new Uint8Array(16)))).to.include({ call: 'cuMemcpyHtoD_v2', driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memRelease(handle);
      driver.memAddressFree(va, granularity);
    });
  });

  describe('CudaDriver#memUnmap', function () {
    it('rejects a range that is part of a mapping with CUDA_ERROR_INVALID_VALUE', function () {
      const handle = driver.memCreate(2 * granularity, 0);
      const va = driver.memAddressReserve(4 * granularity);
      driver.memMap(va, 2 * granularity, handle);
      expect(thrown(() => driver.memUnmap(va, granularity))).to.include({ call: 'cuMemUnmap', driverName: 'CUDA_ERROR_INVALID_VALUE' });
      driver.memUnmap(va, 2 * granularity);
      driver.memRelease(handle);
      driver.memAddressFree(va, 4 * granularity);
    });

    it('accepts a reserved range that holds no mapping, as the driver does', function () {
      const handle = driver.memCreate(2 * granularity, 0);
      const va = driver.memAddressReserve(4 * granularity);
      driver.memMap(va, 2 * granularity, handle);
      driver.memUnmap(va + BigInt(2 * granularity), granularity);
      driver.memSetAccess(va, 2 * granularity, 0);
      driver.memcpyHtoD(va, pattern(64, 4));
      expect(read(va, 64).equals(Buffer.from(pattern(64, 4)))).to.equal(true);
      driver.memUnmap(va, 2 * granularity);
      driver.memRelease(handle);
      driver.memAddressFree(va, 4 * granularity);
    });
  });

  describe('CudaDriver#memCreate and #memRelease', function () {
    it('takes room from the device until the allocation is both released and unmapped', function () {
      const free = () => driver.memInfo().freeBytes;
      const before = free();
      const handle = driver.memCreate(4 * granularity, 0);
      expect(free()).to.be.at.most(before - 4 * granularity);
      const va = driver.memAddressReserve(4 * granularity);
      driver.memMap(va, 4 * granularity, handle);
      driver.memRelease(handle);
      expect(free()).to.be.at.most(before - 4 * granularity);
      driver.memUnmap(va, 4 * granularity);
      driver.memAddressFree(va, 4 * granularity);
      if (t.hooks !== null) expect(free()).to.equal(before);
    });

    it('counts against the device it was created on', function () {
      const h = hooks(this);
      const other = driver.retainPrimaryContext(driver.device(1));
      h.setDeviceCapacity(1, 8 * granularity);
      try {
        const handle = driver.memCreate(6 * granularity, 1);
        driver.setCurrentContext(other);
        expect(driver.memInfo().freeBytes).to.equal(2 * granularity);
        expect(thrown(() => driver.memCreate(4 * granularity, 1))).to.include({ call: 'cuMemCreate', result: CudaResult.OUT_OF_MEMORY, driverName: 'CUDA_ERROR_OUT_OF_MEMORY' });
        driver.memRelease(handle);
        expect(driver.memInfo().freeBytes).to.equal(8 * granularity);
      } finally {
        driver.setCurrentContext(t.context);
        h.setDeviceCapacity(1, driver.deviceTotalBytes(0));
        driver.releasePrimaryContext(1);
      }
    });

    it('rejects a size off the granularity with CUDA_ERROR_INVALID_VALUE', function () {
      expect(thrown(() => driver.memCreate(granularity + 1, 0))).to.include({ call: 'cuMemCreate', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });

    it('rejects a second release of the same handle with CUDA_ERROR_INVALID_VALUE', function () {
      hooks(this); // undefined behaviour on the real driver
      const handle = driver.memCreate(granularity, 0);
      driver.memRelease(handle);
      const error = thrown(() => driver.memRelease(handle));
      expect(error).to.be.instanceOf(CudaError);
      expect(error).to.include({ call: 'cuMemRelease', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });
  });

  describe('CudaDriver#memGetAddressRange', function () {
    it('gives the base and size of the cuMemAlloc allocation holding an interior pointer', function () {
      const ptr = driver.memAlloc(3 * MiB + 5);
      expect(driver.memGetAddressRange(ptr + 12345n)).to.deep.equal({ base: ptr, bytes: 3 * MiB + 5 });
      driver.memFree(ptr);
    });

    it('gives the mapping holding a pointer into mapped memory', function () {
      const handle = driver.memCreate(granularity, 0);
      const va = driver.memAddressReserve(4 * granularity);
      const at = va + BigInt(2 * granularity);
      driver.memMap(at, granularity, handle);
      driver.memSetAccess(at, granularity, 0);
      expect(driver.memGetAddressRange(at + 77n)).to.deep.equal({ base: at, bytes: granularity });
      driver.memUnmap(at, granularity);
      driver.memRelease(handle);
      driver.memAddressFree(va, 4 * granularity);
    });

    it('turns an address the driver did not give into CUDA_ERROR_NOT_FOUND', function () {
      expect(thrown(() => driver.memGetAddressRange(0x1000n))).to.include({ call: 'cuMemGetAddressRange_v2', result: CudaResult.NOT_FOUND, driverName: 'CUDA_ERROR_NOT_FOUND' });
    });

    it('does not count pinned host memory as device memory', function () {
      hooks(this); // with unified addressing the real driver may know pinned host memory's range
      const pinned = driver.memHostAlloc(4096);
      expect(thrown(() => driver.memGetAddressRange(pinned.address))).to.include({ call: 'cuMemGetAddressRange_v2', driverName: 'CUDA_ERROR_NOT_FOUND' });
      driver.memFreeHost(pinned.address);
    });
  });

  describe('CudaDriver#memExportToShareableHandle and #memImportFromShareableHandle', function () {
    it('imports an exported allocation in the same process as a new handle to the same bytes', function () {
      const handle = driver.memCreate(granularity, 0, { shareable: true });
      const fd = driver.memExportToShareableHandle(handle);
      const imported = driver.memImportFromShareableHandle(fd);
      closeSync(fd);
      expect(imported.handle).to.not.equal(handle.handle);
      const a = driver.memAddressReserve(granularity);
      const b = driver.memAddressReserve(granularity);
      driver.memMap(a, granularity, handle);
      driver.memMap(b, granularity, imported);
      driver.memSetAccess(a, granularity, 0);
      driver.memSetAccess(b, granularity, 0);
      driver.memcpyHtoD(a, pattern(1000, 4));
      expect(read(b, 1000).equals(Buffer.from(pattern(1000, 4)))).to.equal(true);
      for (const ptr of [a, b]) {
        driver.memUnmap(ptr, granularity);
        driver.memAddressFree(ptr, granularity);
      }
      driver.memRelease(handle);
      driver.memRelease(imported);
    });

    it('refuses to export an allocation not created shareable', function () {
      const handle = driver.memCreate(granularity, 0);
      expect(thrown(() => driver.memExportToShareableHandle(handle))).to.be.instanceOf(CudaError).and.include({ call: 'cuMemExportToShareableHandle' });
      driver.memRelease(handle);
    });

    it('refuses a file descriptor that is not driver memory with CUDA_ERROR_INVALID_VALUE', function () {
      hooks(this); // the real driver's result for a foreign descriptor varies
      expect(thrown(() => driver.memImportFromShareableHandle(0))).to.include({ call: 'cuMemImportFromShareableHandle', driverName: 'CUDA_ERROR_INVALID_VALUE' });
    });
  });

  describe('lazy device memory on the stand-in', function () {
    it('replays 60 GiB of allocations under an 80 GiB capacity without touching the pages', function () {
      const h = hooks(this);
      const total = driver.memInfo().totalBytes;
      h.setCapacity(80 * GiB);
      const held: bigint[] = [];
      try {
        for (let i = 0; i < 60; i++) held.push(driver.memAlloc(GiB));
        const handle = driver.memCreate(8 * GiB, 0);
        expect(driver.memInfo().freeBytes).to.equal(12 * GiB);
        driver.memcpyHtoD(held[59]! + BigInt(GiB - 16), pattern(16, 1)); // touches one page
        driver.memRelease(handle);
      } finally {
        for (const ptr of held) driver.memFree(ptr);
        h.setCapacity(total);
      }
      expect(driver.memInfo().freeBytes).to.equal(total);
    });
  });
});
