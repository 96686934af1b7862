import { expect } from 'chai';
import { CachingAllocator, CpuMemoryBackend } from '@stowage/core';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { DEFAULT_FIRST_SEGMENT_BYTES, DEFAULT_MIN_SEGMENT_BYTES, webGpuEngineDefaults, webGpuSegmentSize } from '@stowage/allocator-webgpu';
import { allocatorOn, deviceOrSkip } from './testDevice.js';

const KiB = 2 ** 10;
const MiB = 2 ** 20;
const GiB = 2 ** 30;
/** Segment kinds (WebGpuUsage.ts's USAGE_KINDS). */
const STORAGE = 0;
const UNIFORM = 1;

describe('webGpuSegmentSize', () => {
  const rule = webGpuSegmentSize(256 * MiB);
  const storage = (bytes: number, kindReservedBytes: number): number => rule(bytes, kindReservedBytes, { kind: STORAGE, kindReservedBytes });
  const uniform = (bytes: number, kindReservedBytes: number): number => rule(bytes, kindReservedBytes, { kind: UNIFORM, kindReservedBytes });

  it('makes the first storage segment 416 KiB, however small the request', () => {
    expect(DEFAULT_FIRST_SEGMENT_BYTES).to.equal(416 * KiB);
    expect(storage(512, 0)).to.equal(416 * KiB);
  });

  it('makes the first uniform segment 16 KiB, sized by the uniform segments alone', () => {
    expect(uniform(512, 0)).to.equal(16 * KiB);
    expect(rule(512, GiB, { kind: UNIFORM, kindReservedBytes: 0 }), "a gibibyte of storage segments does not grow the uniform class's").to.equal(16 * KiB);
    expect(uniform(512, 64 * KiB), 'doubling, as storage').to.equal(64 * KiB);
  });

  it('doubles what its class reserved with each new segment up to 4 MiB, then adds half of it, rounded up to an eighth of its power of two', () => {
    expect(storage(512, 416 * KiB)).to.equal(416 * KiB);
    expect(storage(512, 832 * KiB)).to.equal(832 * KiB);
    expect(storage(512, 3 * MiB + 4 * KiB), 'in 256 KiB steps').to.equal(3.25 * MiB);
    expect(storage(512, 4 * MiB)).to.equal(2 * MiB);
    expect(storage(512, 5 * MiB + 4 * KiB), '2.5 MiB + 2 KiB in 256 KiB steps').to.equal(2.75 * MiB);
    expect(storage(512, 32 * MiB)).to.equal(16 * MiB);
  });

  it('reserves the first 48 MiB in pieces: no segment crosses the minimum', () => {
    expect(DEFAULT_MIN_SEGMENT_BYTES).to.equal(48 * MiB);
    expect(storage(512, 40 * MiB), 'not half of what is reserved').to.equal(8 * MiB);
    expect(storage(512, 47 * MiB)).to.equal(MiB);
    expect(storage(512, 48 * MiB - 4 * KiB), 'what is left, however little').to.equal(4 * KiB);
  });

  it('then adds an eighth of what its class reserved (in 2 MiB steps) until it reserved twice the minimum', () => {
    expect(storage(512, 48 * MiB)).to.equal(6 * MiB);
    expect(storage(512, 90 * MiB), '11.25 MiB in 2 MiB steps').to.equal(12 * MiB);
    expect(storage(512, 96 * MiB)).to.equal(48 * MiB);
  });

  it('reserves at least the minimum from then on, growing to a sixteenth of what its class reserved, at most maxBufferSize', () => {
    expect(storage(512, 400 * MiB)).to.equal(48 * MiB);
    expect(storage(512, 2048 * MiB)).to.equal(128 * MiB);
    expect(storage(512, 2050 * MiB), 'in 2 MiB steps').to.equal(130 * MiB);
    expect(storage(512, 8192 * MiB)).to.equal(256 * MiB);
  });

  it('gives a request larger than half the segment its class would get (half the minimum once past it) a segment of its own size, rounded up', () => {
    expect(storage(208 * KiB, 0), 'half the first segment still shares').to.equal(416 * KiB);
    expect(storage(300 * KiB, 0), 'in 32 KiB steps').to.equal(320 * KiB);
    expect(storage(600 * KiB, MiB)).to.equal(640 * KiB);
    expect(storage(25 * MiB, 400 * MiB), 'over half the minimum: in 2 MiB steps').to.equal(26 * MiB);
    expect(storage(24 * MiB, 400 * MiB), 'half the minimum still shares').to.equal(48 * MiB);
    expect(storage(3 * MiB, 48 * MiB), 'an eighth of 48 MiB holds two').to.equal(6 * MiB);
    expect(storage(5 * MiB, 48 * MiB), 'past the minimum, a segment twice its size, that another fits').to.equal(10 * MiB);
    expect(storage(24 * MiB, 48 * MiB), 'up to the minimum').to.equal(48 * MiB);
    expect(storage(30 * MiB, 2048 * MiB), 'half the minimum, not of a grown segment').to.equal(30 * MiB);
    expect(storage(300 * MiB, 0), 'capped at maxBufferSize: the engine then asks for the request itself').to.equal(256 * MiB);
  });

  it('takes another first size, growth and minimum', () => {
    const other = webGpuSegmentSize(256 * MiB, { firstSegmentBytes: MiB, growth: 0.5, minimumSegmentBytes: 32 * MiB });
    expect(other(512, 0, { kind: STORAGE, kindReservedBytes: 0 })).to.equal(MiB);
    expect(other(512, 8 * MiB, { kind: STORAGE, kindReservedBytes: 8 * MiB })).to.equal(4 * MiB);
    expect(other(512, 32 * MiB, { kind: STORAGE, kindReservedBytes: 32 * MiB })).to.equal(4 * MiB);
    const steep = webGpuSegmentSize(256 * MiB, { minimumSegmentBytes: 32 * MiB, growthPastMinimum: 1 });
    expect(steep(512, 32 * MiB, { kind: STORAGE, kindReservedBytes: 32 * MiB }), 'growth past the minimum capped at the minimum: the former rule').to.equal(32 * MiB);
    const fixed = webGpuSegmentSize(256 * MiB, { firstSegmentBytes: 48 * MiB, firstUniformSegmentBytes: 48 * MiB });
    expect(fixed(512, 0, { kind: STORAGE, kindReservedBytes: 0 }), 'a first size of the minimum: the fixed rule').to.equal(48 * MiB);
    expect(fixed(512, 26 * MiB, { kind: STORAGE, kindReservedBytes: 26 * MiB }), 'no pieces after a segment of its own').to.equal(48 * MiB);
  });
});

describe('webGpuEngineDefaults', () => {
  it('reserves a small program in a few segments, within twice what it allocates (engine, no device)', () => {
    // A device whose pages cannot be mapped, as WebGPU's: fixed segments.
    const options = { ...webGpuEngineDefaults({ maxBufferSize: 256 * MiB }), expandableSegments: false };
    using engine = new CachingAllocator(new VirtualMemoryBackend({ storeData: false, alignment: 256 }), options);
    for (let i = 0; i < 256; i++) engine.allocate(4 * KiB);
    expect(engine.memoryStats()['reserved_bytes.all.current'], '416 + 416 + 832 KiB').to.equal(1664 * KiB);
    expect(engine.memoryStats()['segment.all.current']).to.equal(3);
    engine.assertInvariants();
  });

  it('grows segments to an eighth of the budget under a budget of less than eight minimums', () => {
    const { segmentSize } = webGpuEngineDefaults({ maxBufferSize: 256 * MiB, budgetBytes: 64 * MiB });
    expect(segmentSize!(512, 0, { kind: STORAGE, kindReservedBytes: 0 }), 'the first segment is as small as without a budget').to.equal(416 * KiB);
    expect(segmentSize!(512, 7 * MiB, { kind: STORAGE, kindReservedBytes: 7 * MiB }), 'the rest of the 8 MiB minimum').to.equal(MiB);
    expect(segmentSize!(512, 8 * MiB, { kind: STORAGE, kindReservedBytes: 8 * MiB }), 'then an eighth of what is reserved, in 2 MiB steps').to.equal(2 * MiB);
    expect(segmentSize!(512, 64 * MiB, { kind: STORAGE, kindReservedBytes: 64 * MiB }), 'up to the minimum').to.equal(8 * MiB);
    expect(segmentSize!(5 * MiB, 8 * MiB, { kind: STORAGE, kindReservedBytes: 8 * MiB }), 'over half the minimum: its own, in 512 KiB steps').to.equal(5 * MiB);
  });

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
