import { expect } from 'chai';
import fc from 'fast-check';
import type { DataPtr } from '@stowage/core';
import { assertAllocatorInvariants, expectTypedOrSuccess, junkArgs } from '@stowage/core/testing';
import type { WebGpuAllocator, WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, webgpu } from '@stowage/allocator-webgpu';
import { allocatorOn, COPY_DST, COPY_SRC, deviceOrSkip, STORAGE } from './testDevice.js';

// Note [The public API under junk] (core's test/publicApi.property.test.ts), for the WebGPU allocator's entry
// points: a typed StowageError or success, never another error, and the allocator consistent afterwards (the next
// allocation works and the statistics equal a recount of the pointers the test holds).
describe("the WebGPU allocator's public API under junk", function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  before(async function () {
    context = await deviceOrSkip(this);
  });

  type Entry = [string, (allocator: WebGpuAllocator, a: unknown[], buffer: GPUBuffer) => unknown];
  const entries: Entry[] = [
    ['webgpu', (_, a) => webgpu(a[0] as object)],
    ['createWebGpuAllocator(context, junk)', (_, a) => createWebGpuAllocator(context, a[0] as object).dispose()],
    ['WebGpuAllocator#allocate', (al, a) => al.allocate(a[0] as number, a[1] as object)],
    ['WebGpuAllocator#free', (al, a) => al.free(a[0] as DataPtr)],
    ['WebGpuAllocator#importBuffer', (al, a, buffer) => al.importBuffer((a[0] ?? buffer) as GPUBuffer, a[1] as object)],
    ['WebGpuAllocator#bindingOf', (al, a) => al.bindingOf(a[0] as DataPtr)],
    ['WebGpuAllocator#writeBytes', (al, a) => al.writeBytes(a[0] as DataPtr, a[1] as Uint8Array, a[2] as number)],
    ['WebGpuAllocator#readBytes', (al, a) => al.readBytes(a[0] as DataPtr, a[1] as number, a[2] as number)],
    ['WebGpuAllocator#copyData', (al, a) => al.copyData(a[0] as DataPtr, a[1] as DataPtr, a[2] as number)],
  ];
  for (const [name, call] of entries) {
    it(`${name} gives a typed error or succeeds, and leaves the allocator consistent`, async () => {
      using allocator = allocatorOn(context);
      const held = [allocator.allocate(256), allocator.allocate(1000)];
      const buffer = context.device.createBuffer({ size: 256, usage: STORAGE | COPY_SRC | COPY_DST });
      try {
        await fc.assert(
          fc.asyncProperty(junkArgs(3, [...held, 64, 4, new Uint8Array(8), buffer, { byteOffset: 4 }]), async (a) => {
            const made = await expectTypedOrSuccess(name, () => call(allocator, a, buffer));
            const live = held.filter((p) => !p.isReleased);
            const probe = allocator.allocate(64);
            assertAllocatorInvariants(allocator.engine, [...live, probe, ...(isOwnPtr(allocator, made) ? [made] : [])]);
            allocator.free(probe);
            if (isOwnPtr(allocator, made)) allocator.free(made);
            else if (made !== undefined && typeof made === 'object' && (made as DataPtr).isReleased === false && typeof (made as DataPtr).release === 'function') allocator.free(made as DataPtr);
          }),
          { numRuns: 60 },
        );
      } finally {
        buffer.destroy();
      }
      expect(allocator.allocate(8).byteLength).to.equal(8);
    });
  }
});

/** A live pointer the engine allocated (an imported one is not counted in its statistics). */
function isOwnPtr(allocator: WebGpuAllocator, value: unknown): value is DataPtr {
  return typeof value === 'object' && value !== null && allocator.engine.owns(value as DataPtr) && !(value as DataPtr).isReleased;
}
