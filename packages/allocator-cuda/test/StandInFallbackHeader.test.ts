import { expect } from 'chai';
import { CudaDriver } from '@stowage/allocator-cuda';
import { buildStandIn, standInAbiFacts, StandInHooks } from '@stowage/allocator-cuda/testing';

import { pattern } from './testDriver.js';

describe('native/standin/cuda_fallback.h', function () {
  it('declares the sizes, layouts, enum values and flags of the toolkit\'s cuda.h', function () {
    const fromCudaH = standInAbiFacts();
    const fromFallback = standInAbiFacts(process.env, { fallbackHeader: true });
    if (fromCudaH.facts === null || fromFallback.facts === null) {
      console.log(`      skipped: ${fromCudaH.facts === null ? fromCudaH.reason : (fromFallback as { reason: string }).reason}`);
      this.skip();
    }
    expect(fromFallback.facts).to.contain('sizeof(CUipcMemHandle) 64');
    expect(fromFallback.facts).to.equal(fromCudaH.facts);
  });

  it('builds a stand-in that runs memory, VMM and stream calls', function () {
    const build = buildStandIn(process.env, { fallbackHeader: true });
    if (build.path === null) {
      console.log(`      skipped: ${build.reason}`);
      this.skip();
    }
    const driver = CudaDriver.open({ paths: [build.path] });
    try {
      driver.init();
      expect(StandInHooks.open(build.path)).to.not.equal(null);
      expect(driver.deviceCount()).to.be.at.least(1);
      const context = driver.retainPrimaryContext(driver.device(0));
      driver.setCurrentContext(context);
      const ptr = driver.memAlloc(4096);
      driver.memcpyHtoD(ptr, pattern(4096, 6));
      const granularity = driver.memGetAllocationGranularity(0);
      const handle = driver.memCreate(granularity, 0);
      const va = driver.memAddressReserve(granularity);
      driver.memMap(va, granularity, handle);
      driver.memSetAccess(va, granularity, 0);
      const stream = driver.streamCreate();
      driver.memcpyDtoDAsync(va, ptr, 4096, stream);
      driver.streamSynchronize(stream);
      const back = new Uint8Array(4096);
      driver.memcpyDtoH(back, va);
      expect(Buffer.from(back).equals(Buffer.from(pattern(4096, 6)))).to.equal(true);
      driver.streamDestroy(stream);
      driver.memUnmap(va, granularity);
      driver.memAddressFree(va, granularity);
      driver.memRelease(handle);
      driver.memFree(ptr);
      driver.releasePrimaryContext(0);
    } finally {
      driver.unload();
    }
  });
});
