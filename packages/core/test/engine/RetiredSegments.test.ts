import { expect } from 'chai';
import fc from 'fast-check';
import type { CachingAllocatorOptions, DataPtr } from '@stowage/core';
import type { EngineStep } from './helpers.js';
import { applyEngineStep, MiB, RetiringAllocator } from './helpers.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

function retiring(options: CachingAllocatorOptions = { preset: 'pytorch' }): { allocator: RetiringAllocator; backend: VirtualMemoryBackend } {
  const backend = new VirtualMemoryBackend({ storeData: false, streams: 2 });
  return { allocator: new RetiringAllocator(backend, options), backend };
}

describe('CachingAllocator retired segments (Note [Retired segments])', () => {
  it('carves nothing more from a retired segment and returns it once its last block is freed', () => {
    const { allocator } = retiring();
    const released: number[] = [];
    allocator.events.on('segmentReleased', (e) => released.push(e.bytes));
    const a = allocator.allocate(4 * MiB); // a 20 MiB segment, split
    const b = allocator.allocate(4 * MiB);
    allocator.free(a); // a free block of the segment, in the pool
    expect(allocator.retire(a.handle as number)).to.equal(true);
    allocator.assertInvariants();
    const c = allocator.allocate(4 * MiB);
    expect(c.handle, 'a new segment, not the retired one').not.to.equal(b.handle);
    expect(released, 'b still lives in it').to.deep.equal([]);
    allocator.free(b);
    expect(released, 'the retired segment went back with its last block').to.deep.equal([20 * MiB]);
    const s = allocator.memoryStats();
    expect(s['reserved_bytes.all.current']).to.equal(20 * MiB);
    expect(s['inactive_split.all.current'], 'no free split block of the retired segment is counted').to.equal(1);
    allocator.assertInvariants();
    expect(allocator.retire(a.handle as number), 'gone already').to.equal(false);
  });

  it('returns an idle retired segment at once, and one whose block waits on a stream only after that stream is done', () => {
    const { allocator, backend } = retiring();
    const idle = allocator.allocate(1 * MiB);
    allocator.free(idle);
    allocator.retire(idle.handle as number);
    expect(allocator.reservedBytes, 'nothing in use: returned at once').to.equal(0);
    const held = allocator.allocate(1 * MiB);
    allocator.recordStream(held, 1);
    backend.holdStream(1);
    allocator.free(held); // waits on stream 1
    allocator.retire(held.handle as number);
    expect(allocator.reservedBytes, 'the pending block keeps the segment').to.equal(2 * MiB);
    allocator.assertInvariants();
    backend.completeStream(1);
    allocator.free(allocator.allocate(512)); // processes the completed event
    expect(allocator.snapshot().segments.map((seg) => seg.address), 'only the new small segment is left').not.to.include(held.address);
    allocator.assertInvariants();
  });

  it('keeps every invariant when random programs retire segments along the way', () => {
    type Op = EngineStep | { kind: 'retire'; pick: number };
    const op: fc.Arbitrary<Op> = fc.oneof(
      { weight: 10, arbitrary: fc.record({ kind: fc.constant('alloc' as const), bytes: fc.integer({ min: 1, max: 24 * MiB }), stream: fc.integer({ min: 0, max: 1 }) }) },
      { weight: 8, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('recordStream' as const), pick: fc.nat(), stream: fc.integer({ min: 0, max: 1 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('hold' as const), stream: fc.integer({ min: 0, max: 1 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('complete' as const), stream: fc.integer({ min: 0, max: 1 }) }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'emptyCache' as const }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('retire' as const), pick: fc.nat() }) },
    );
    fc.assert(
      fc.property(fc.constantFrom<CachingAllocatorOptions>({ preset: 'pytorch' }, { preset: 'best' }), fc.array(op, { maxLength: 60 }), (options, ops) => {
        const { allocator, backend } = retiring(options);
        const live: DataPtr[] = [];
        for (const step of ops) {
          // assertInvariants checks that a retired segment's free blocks are in no pool, so nothing is carved
          // from it, and that a retired segment with nothing in use has gone back.
          if (step.kind === 'retire') {
            if (live.length > 0) allocator.retire(live[step.pick % live.length]!.handle as number);
          } else applyEngineStep(allocator, backend, live, step);
          allocator.assertInvariants();
        }
        for (const ptr of live.splice(0)) allocator.free(ptr);
        backend.completeStream(0);
        backend.completeStream(1);
        allocator.emptyCache();
        expect(allocator.reservedBytes, 'everything went back').to.equal(0);
        allocator.assertInvariants();
      }),
      { numRuns: 150 },
    );
  });

  it('keeps oversize_segments at zero when a retired expandable segment of at least the max split size goes back', () => {
    const backend = new VirtualMemoryBackend({ storeData: false });
    const allocator = new RetiringAllocator(backend, { preset: 'pytorch', expandableSegments: true, maxSplitSize: 24 * MiB });
    const big = allocator.allocate(30 * MiB); // one expandable segment with 30 MiB of pages mapped
    expect(allocator.memoryStats()['oversize_segments.current'], 'an expandable segment is not counted as an oversize segment').to.equal(0);
    allocator.retire(big.handle as number);
    allocator.free(big); // the retired segment goes back with its 30 MiB mapped
    allocator.assertInvariants();
    const s = allocator.memoryStats();
    expect(s['reserved_bytes.all.current']).to.equal(0);
    expect(s['oversize_segments.current'], 'no segment is left, so no oversize segment').to.equal(0);
    expect(s['oversize_segments.freed'], 'nothing that was never counted is counted as freed').to.equal(s['oversize_segments.allocated']);
  });
});
