import { expect } from 'chai';
import { CachingAllocator, CpuMemoryBackend } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { DEFAULT_MIN_SEGMENT_BYTES, webGpuEngineDefaults, webGpuSegmentSize } from '@stowage/allocator-webgpu';
import { allocatorOn, deviceOrSkip } from './testDevice.js';

const MiB = 2 ** 20;

describe('webGpuSegmentSize', () => {
  const size = webGpuSegmentSize(256 * MiB);

  it('reserves at least 48 MiB, however small the request', () => {
    expect(DEFAULT_MIN_SEGMENT_BYTES).to.equal(48 * MiB);
    expect(size(512, 0)).to.equal(48 * MiB);
  });

  it('gives a request larger than half the minimum a segment of its own size, rounded up to 2 MiB', () => {
    expect(size(100 * MiB, 0)).to.equal(100 * MiB);
    expect(size(25 * MiB, 0)).to.equal(26 * MiB);
    expect(size(24 * MiB, 0), 'half the minimum still shares').to.equal(48 * MiB);
    expect(size(300 * MiB, 0), 'capped at maxBufferSize: the engine then asks for the request itself').to.equal(256 * MiB);
  });

  it('grows with what is reserved (a sixteenth, in 2 MiB steps) and stops at maxBufferSize', () => {
    expect(size(512, 2048 * MiB)).to.equal(128 * MiB);
    expect(size(512, 2050 * MiB)).to.equal(130 * MiB);
    expect(size(512, 8192 * MiB)).to.equal(256 * MiB);
  });

  it('takes another minimum', () => {
    expect(webGpuSegmentSize(256 * MiB, 32 * MiB)(512, 0)).to.equal(32 * MiB);
  });
});

describe('webGpuEngineDefaults', () => {
  // Note [WebGPU segment sizing]: a request over half the minimum gets a segment of its own size rounded up to
  // 2 MiB, and the engine's fallback (PyTorch's segmentSize) rounds to 2 MiB too; under a budget that is not a
  // multiple of 2 MiB ('100MB' is 100,000,000 bytes) neither fits, though the request itself does, so the policy
  // then gives such a request a segment of exactly its rounded size.
  it('serves a request that fits the budget, though the 2 MiB round-up of its segment would not (engine, no device)', () => {
    using engine = new CachingAllocator(new CpuMemoryBackend(), { ...webGpuEngineDefaults({ maxBufferSize: 256 * MiB }), memoryLimit: 100_000_000 });
    const ptr = engine.allocate(95 * MiB);
    expect(ptr.byteLength).to.equal(95 * MiB);
    expect(engine.memoryStats()['reserved_bytes.all.current']).to.be.at.most(100_000_000);
  });

  // Minimum segments are taken only where the budget leaves room for them: under a small limit, a first tensor's
  // large minimum segment would take most of the budget, and a later tensor that does not fit the rest of that
  // segment would run out of memory with far less live. Here 30 + 40 MiB under a 100 MiB limit (64 MiB minimum
  // segments would leave 36 MiB for the 40 MiB request; 32 MiB minimum segments fit both in 32 + 40 MiB; PyTorch's
  // sizing would reserve 30 + 40 MiB).
  it('serves a 40 MiB request after a 30 MiB one under a 100 MiB budget (engine, no device)', () => {
    const budget = 100 * MiB;
    using engine = new CachingAllocator(new CpuMemoryBackend(), { ...webGpuEngineDefaults({ maxBufferSize: 256 * MiB, budgetBytes: budget }), memoryLimit: budget });
    engine.allocate(30 * MiB);
    const large = engine.allocate(40 * MiB);
    expect(large.byteLength).to.equal(40 * MiB);
  });
});

describe('WebGpuAllocator#allocate under a budget that is not a multiple of 2 MiB', function () {
  this.timeout(120_000);
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
