import { expect } from 'chai';
import fc from 'fast-check';
import type { AllocatorStats, CachingAllocatorOptions, DataPtr } from '@stowage/core';
import { DoubleFreeError, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import type { EngineStep } from './helpers.js';
import { applyEngineStep, engine, MiB } from './helpers.js';

/** One step of a random program against the engine. */
type Op =
  | EngineStep
  | { kind: 'doubleFree' }
  | { kind: 'badAlloc'; value: unknown }
  | { kind: 'badStream' };

const sizes = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 64 * 1024 }) },
  { weight: 3, arbitrary: fc.integer({ min: 64 * 1024, max: 2 * MiB }) },
  { weight: 2, arbitrary: fc.integer({ min: 2 * MiB, max: 24 * MiB }) },
  { weight: 1, arbitrary: fc.constant(0) },
);
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 10, arbitrary: fc.record({ kind: fc.constant('alloc' as const), bytes: sizes, stream: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('recordStream' as const), pick: fc.nat(), stream: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('hold' as const), stream: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('complete' as const), stream: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'emptyCache' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('trim' as const), target: fc.integer({ min: 0, max: 64 * MiB }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'doubleFree' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('badAlloc' as const), value: fc.constantFrom(-1, 1.5, Number.NaN, 2 ** 53, '8') }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'badStream' as const }) },
);

/** Live pointers never overlap, and the engine's counters equal a recount from the caller's side. */
function checkAgainstRecount(live: readonly DataPtr[], s: AllocatorStats): void {
  const sorted = live.filter((p) => p.byteLength > 0).sort((a, b) => a.address - b.address);
  for (let i = 1; i < sorted.length; i++) expect(sorted[i - 1]!.address + sorted[i - 1]!.byteLength).to.be.at.most(sorted[i]!.address);
  expect(s['allocation.all.current']).to.equal(live.length);
  // Blocks freed but waiting on other streams still count as requested (PyTorch's meaning).
  expect(s['requested_bytes.all.current']).to.be.at.least(live.reduce((n, p) => n + p.byteLength, 0));
  for (const name of ['allocation', 'segment', 'allocated_bytes', 'reserved_bytes', 'active_bytes', 'requested_bytes', 'inactive_split', 'inactive_split_bytes'] as const) {
    expect(s[`${name}.all.current`], name).to.equal(s[`${name}.small_pool.current`] + s[`${name}.large_pool.current`]);
    expect(s[`${name}.all.current`], name).to.be.at.least(0);
    expect(s[`${name}.all.peak`], name).to.be.at.least(s[`${name}.all.current`]);
  }
  expect(s['reserved_bytes.all.current']).to.be.at.least(s['active_bytes.all.current']);
  expect(s['active_bytes.all.current']).to.be.at.least(s['allocated_bytes.all.current']);
}

function runProgram(options: CachingAllocatorOptions, ops: readonly Op[]): void {
  const { allocator, backend } = engine(options, { streams: 2, capacityBytes: 96 * MiB });
  const live: DataPtr[] = [];
  const freed: DataPtr[] = [];
  for (const o of ops) {
    const before = allocator.memoryStats();
    switch (o.kind) {
      case 'doubleFree':
        if (freed.length > 0) {
          expect(() => allocator.free(freed[freed.length - 1]!)).to.throw(DoubleFreeError);
          expect(() => allocator.recordStream(freed[freed.length - 1]!, 1)).to.throw(UseAfterReleaseError);
          expect(allocator.memoryStats()).to.deep.equal(before);
        }
        break;
      case 'badAlloc':
        expect(() => allocator.allocate(o.value as number)).to.throw(InvalidArgumentError);
        expect(allocator.memoryStats()).to.deep.equal(before);
        break;
      case 'badStream':
        expect(() => allocator.allocate(64, { stream: 7 })).to.throw(InvalidArgumentError);
        expect(allocator.memoryStats()).to.deep.equal(before);
        break;
      default: {
        const released = applyEngineStep(allocator, backend, live, o);
        if (released) freed.push(released);
      }
    }
    allocator.assertInvariants();
    checkAgainstRecount(live, allocator.memoryStats());
    expect(backend.reservedBytes, 'the backend holds what the engine counts as reserved').to.equal(allocator.reservedBytes);
  }
  for (const ptr of live.splice(0)) allocator.free(ptr);
  backend.completeStream(0);
  backend.completeStream(1);
  allocator.emptyCache();
  allocator.assertInvariants();
  const s = allocator.memoryStats();
  expect(s['reserved_bytes.all.current'], 'freeing everything and emptyCache returns reserved to zero').to.equal(0);
  expect(s['segment.all.current']).to.equal(0);
  expect(s['active_bytes.all.current']).to.equal(0);
  expect(backend.reservedBytes).to.equal(0);
}

describe('CachingAllocator invariants under random programs', function () {
  this.timeout(60_000);
  for (const preset of ['pytorch', 'best'] as const) {
    it(`keeps blocks tiling their segments, live blocks disjoint and stats equal to a recount (${preset} preset)`, () => {
      fc.assert(fc.property(fc.array(op, { maxLength: 80 }), (ops) => runProgram({ preset }, ops)), { numRuns: 150 });
    });
  }

  it('holds with unified pools and growing segments (the WebGPU sizing)', () => {
    const options: CachingAllocatorOptions = { preset: 'best', expandableSegments: false, unifiedPools: true, segmentSize: (n, reserved) => Math.max(n, 4 * MiB, reserved / 4) };
    fc.assert(fc.property(fc.array(op, { maxLength: 80 }), (ops) => runProgram(options, ops)), { numRuns: 100 });
  });

  it('holds with unsplit blocks in segments of the request size under a limit (one segment per allocation)', () => {
    const options: CachingAllocatorOptions = { preset: 'best', expandableSegments: false, splitBlocks: false, segmentSize: (n) => n, memoryLimit: '64MiB' };
    fc.assert(fc.property(fc.array(op, { maxLength: 80 }), (ops) => runProgram(options, ops)), { numRuns: 100 });
  });

  it('holds with a max split size, power-of-two divisions and garbage collection under a limit', () => {
    const options: CachingAllocatorOptions = {
      preset: 'pytorch',
      maxSplitSize: '24MiB',
      roundupPower2Divisions: 4,
      memoryLimit: '80MiB',
      garbageCollectionThreshold: 0.6,
    };
    fc.assert(fc.property(fc.array(op, { maxLength: 80 }), (ops) => runProgram(options, ops)), { numRuns: 100 });
  });
});
