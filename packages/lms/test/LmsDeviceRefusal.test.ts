import { expect } from 'chai';
import type { ForwardingAllocator } from '@stowage/core';
import { createRuntime } from '@stowage/core';
import { patternBytes } from '@stowage/core/testing';
import type { WebGpuAllocator, WebGpuContext, WebGpuMemoryBackend } from '@stowage/allocator-webgpu';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import { lms, pin } from '@stowage/lms';

/**
 * Makes `device` refuse a segment (a `mappedAtCreation` buffer, as the WebGPU backend creates them) with the
 * RangeError Dawn throws when it cannot back one, whenever `refuse(size)` says so (Note [The device says no] in
 * WebGpuMemoryBackend.ts).
 */
function refuseSegments(device: GPUDevice, refuse: (size: number) => boolean): void {
  const createBuffer = device.createBuffer.bind(device);
  Object.defineProperty(device, 'createBuffer', {
    configurable: true,
    value: (descriptor: GPUBufferDescriptor): GPUBuffer => {
      if (descriptor.mappedAtCreation === true && refuse(descriptor.size)) throw new RangeError(`injected: the device cannot back ${descriptor.size} bytes`);
      return createBuffer(descriptor);
    },
  });
}

describe('LMS when the device says no before the budget does', function () {
  this.timeout(120_000);
  /** Devices of their own, kept alive to the end of the run (Dawn crashes if the GPU object goes first). */
  const keep: WebGpuContext[] = [];

    it('reclaims inactive LMS storages when the device refuses a segment before the budget is met', async function () {
      const own = await openWebGpuDevice().catch((error: Error) => {
        console.log(`    skipped: no WebGPU adapter for a device of its own — ${error.message}`);
        return undefined;
      });
      if (own === undefined) return this.skip();
      keep.push(own);
      await using rt = await createRuntime({ plugins: [webgpu({ device: own.device, limit: '64MiB', segmentRefusal: 'mapped' }), lms()] });
      const deviceBytes = 16 << 20; // what this pretend device holds, far below the 64 MiB budget
      const seen: { backend?: WebGpuMemoryBackend } = {};
      refuseSegments(own.device, (size) => (seen.backend?.reservedBytes ?? 0) + size > deviceBytes);
      const storages = [0, 1].map((seed) => {
        const storage = rt.storage(6 << 20, { device: 'webgpu' });
        rt.write(storage, patternBytes(6 << 20, seed));
        pin(storage).release();
        return storage;
      });
      const backend = (seen.backend = ((rt.allocator('webgpu') as ForwardingAllocator).upstream as WebGpuAllocator).backend);
      const third = rt.storage(6 << 20, { device: 'webgpu' });
      expect(backend.refusedSegments).to.be.at.least(1);
      expect(storages.map((s) => s.lms!.state)).to.deep.equal(['reclaimed', 'inactive']);
      expect(backend.reservedBytes).to.be.at.most(deviceBytes);
      expect(third.lms!.state).to.equal('allocated');
      for (const [seed, storage] of storages.entries()) expect([...(await rt.read(storage)).subarray(0, 64)]).to.deep.equal([...patternBytes(6 << 20, seed).subarray(0, 64)]);
      expect(backend.lostError).to.equal(undefined);
    });
});
