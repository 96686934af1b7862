import { expect } from 'chai';
import { CachingAllocator, CpuMemoryBackend } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { webGpuEngineDefaults } from '@stowage/allocator-webgpu';
import { allocatorOn, deviceOrSkip } from './testDevice.js';

const MiB = 2 ** 20;

describe('WebGPU segment sizing (review 8)', function () {
  this.timeout(120_000);

  // Note [WebGPU segment sizing]: a request over half the minimum gets a segment of its own size rounded up to
  // 2 MiB, and the engine's fallback (PyTorch's segmentSize) rounds to 2 MiB too; under a budget that is not a
  // multiple of 2 MiB ('100MB' is 100,000,000 bytes), neither fits, though the request itself does. Before
  // 0907948 the policy gave such a request a segment of exactly its rounded size.
  it('serves a request that fits the budget, though the 2 MiB round-up of its segment would not (engine, no device)', () => {
    using engine = new CachingAllocator(new CpuMemoryBackend(), { ...webGpuEngineDefaults({ maxBufferSize: 256 * MiB }), memoryLimit: 100_000_000 });
    const ptr = engine.allocate(95 * MiB);
    expect(ptr.byteLength).to.equal(95 * MiB);
    expect(engine.memoryStats()['reserved_bytes.all.current']).to.be.at.most(100_000_000);
  });

  // 64 MiB minimum segments (924822d) are taken whenever they fit what is left of the budget, so under a small
  // limit a first tensor takes most of it and a later one that does not fit the rest of that segment runs out of
  // memory with far less live: here 30 + 40 MiB under a 100 MiB limit (with 32 MiB minimum segments both fit in
  // 32 + 40 MiB; PyTorch's sizing would reserve 30 + 40 MiB). The defaults now take the budget into account.
  it('serves a 40 MiB request after a 30 MiB one under a 100 MiB budget (engine, no device)', () => {
    const budget = 100 * MiB;
    using engine = new CachingAllocator(new CpuMemoryBackend(), { ...webGpuEngineDefaults({ maxBufferSize: 256 * MiB, budgetBytes: budget }), memoryLimit: budget });
    engine.allocate(30 * MiB);
    const large = engine.allocate(40 * MiB);
    expect(large.byteLength).to.equal(40 * MiB);
  });

  describe('on a device', () => {
    let context: WebGpuContext;
    before(async function () {
      context = await deviceOrSkip(this);
    });

    it("serves a request within a limit given in decimal units ('100MB') when its 2 MiB-rounded segment would pass it", () => {
      using allocator = allocatorOn(context, { limit: '100MB' });
      const ptr = allocator.allocate(95 * MiB);
      expect(ptr.byteLength).to.equal(95 * MiB);
      expect(allocator.backend.reservedBytes).to.be.at.most(100_000_000);
    });
  });
});
