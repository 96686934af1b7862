import { expect } from 'chai';
import fc from 'fast-check';
import type { DataPtr } from '@stowage/core';
import { CachingAllocator, OutOfMemoryError } from '@stowage/core';
import { expectSnapshotCoversReserved, MiB } from './helpers.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** An engine with expandable segments and a 32 MiB max split size whose backend records every map/unmap size. */
function recordingEngine(options: { fragmentationLimit?: number; capacityBytes?: number; preset?: 'pytorch' | 'best' } = {}) {
  const backend = new VirtualMemoryBackend({ storeData: false, capacityBytes: options.capacityBytes ?? 2 ** 40 });
  const allocator = new CachingAllocator(backend, {
    preset: options.preset ?? 'pytorch',
    expandableSegments: true,
    maxSplitSize: 32 * MiB,
    ...(options.fragmentationLimit === undefined ? {} : { fragmentationLimit: options.fragmentationLimit }),
  });
  const mapping = backend.pageMapping!;
  const page = mapping.pageBytes;
  const calls: { op: 'map' | 'unmap'; bytes: number }[] = [];
  const map = mapping.map.bind(mapping);
  const unmap = mapping.unmap.bind(mapping);
  mapping.map = (range, offset, bytes) => {
    calls.push({ op: 'map', bytes });
    return map(range, offset, bytes);
  };
  mapping.unmap = (range, offset, bytes) => {
    calls.push({ op: 'unmap', bytes });
    unmap(range, offset, bytes);
  };
  const check = (): void => {
    const bad = calls.filter((c) => !(c.bytes > 0) || c.bytes % page !== 0);
    expect(bad, 'every map/unmap is a positive whole number of pages').to.deep.equal([]);
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(backend.reservedBytes);
    allocator.assertInvariants();
    expectSnapshotCoversReserved(allocator);
  };
  return { allocator, backend, calls, check };
}

describe('CachingAllocator#allocate with expandable segments beside an oversize free block (max split size)', () => {
  it('places a request that remaps a gap after an oversize free block in the remapped pages, keeping that block whole', () => {
    const { allocator, check } = recordingEngine();
    const oversize = allocator.allocate(40 * MiB);
    const middle = allocator.allocate(14 * MiB);
    allocator.allocate(2 * MiB);
    allocator.free(middle);
    allocator.emptyCache(); // a 14 MiB gap after the 40 MiB block
    allocator.free(oversize);
    const gapAddress = oversize.address + 40 * MiB;
    const reservedBefore = allocator.reservedBytes;
    const ptr = allocator.allocate(4 * MiB); // fits the gap; the 40 MiB block is not split for it
    check();
    expect(allocator.reservedBytes - reservedBefore, 'the gap pages mapped for it').to.equal(4 * MiB);
    expect(ptr.address, 'the request lies in the pages mapped for it, not in the oversize block').to.be.at.least(gapAddress);
    const blocks = allocator.snapshot().segments.flatMap((s) => s.blocks);
    expect(blocks.some((b) => b.state === 'inactive' && b.size === 40 * MiB), 'the oversize block is still cached whole').to.equal(true);
  });
});

describe('CachingAllocator#allocate with expandable segments after the fragmentation limit unmaps an oversize free block', () => {
  it('serves the request from the free partial page that unmapping left, mapping no zero-byte range', () => {
    // The best preset: unified pools, fragmentationLimit 0.005. 2 MiB pages.
    const { allocator, calls, check } = recordingEngine({ preset: 'best' });
    const reserved: number[] = [];
    allocator.events.on('segmentReserved', (e) => reserved.push(e.bytes));
    allocator.allocate(512); // maps one page: [0, 512) live, [512, 2 MiB) free
    allocator.free(allocator.allocate(40 * MiB)); // extends the free tail: one free 42 MiB - 512 block, oversize
    const mapsBefore = calls.filter((c) => c.op === 'map').length;
    const devicesAllocsBefore = allocator.memoryStats()['num_device_alloc'];
    // 512 B may not take the oversize block; growing first unmaps its whole pages (fragmentation limit), which
    // leaves a 2 MiB - 512 free tail that the request may take: nothing needs mapping.
    const ptr = allocator.allocate(512);
    expect(ptr.byteLength).to.equal(512);
    check();
    expect(reserved.filter((bytes) => !(bytes > 0)), 'segmentReserved events of no bytes').to.deep.equal([]);
    expect(calls.filter((c) => c.op === 'map').slice(mapsBefore).map((c) => c.bytes), 'page mappings for the request').to.deep.equal([]);
    expect(allocator.memoryStats()['num_device_alloc'], 'no device mapping counted').to.equal(devicesAllocsBefore);
  });
  it('serves the request from the free partial page before a gap that unmapping left, mapping no zero-byte range', () => {
    const { allocator, calls, check } = recordingEngine({ preset: 'best' });
    const reserved: number[] = [];
    allocator.events.on('segmentReserved', (e) => reserved.push(e.bytes));
    allocator.allocate(512); // [0, 512) live, [512, 2 MiB) free
    const oversize = allocator.allocate(40 * MiB); // [512, 40 MiB + 512)
    allocator.allocate(2 * MiB - 512); // the rest of the mapped pages, up to 42 MiB
    allocator.free(oversize);
    const mapsBefore = calls.filter((c) => c.op === 'map').length;
    const devicesAllocsBefore = allocator.memoryStats()['num_device_alloc'];
    // Unmapping the oversize block's whole pages leaves [512, 2 MiB) free before a gap [2 MiB, 40 MiB): the gap
    // search counts that free block, which alone holds the request, and maps -0 bytes of the gap.
    const ptr = allocator.allocate(512);
    expect(ptr.byteLength).to.equal(512);
    check();
    expect(reserved.filter((bytes) => !(bytes > 0)), 'segmentReserved events of no bytes').to.deep.equal([]);
    expect(calls.filter((c) => c.op === 'map').slice(mapsBefore).map((c) => c.bytes), 'page mappings for the request').to.deep.equal([]);
    expect(allocator.memoryStats()['num_device_alloc'], 'no device mapping counted').to.equal(devicesAllocsBefore);
  });
});

const SEED = 1; // fixed so the run is reproducible; seeds 1, 3, 4 and 5 all find a zero-byte map

describe('CachingAllocator expandable segments: random programs around the max split size', () => {
  const sizes = fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min: 1, max: 4 * MiB }) },
    { weight: 3, arbitrary: fc.integer({ min: 8 * MiB, max: 31 * MiB }) },
    { weight: 3, arbitrary: fc.integer({ min: 32 * MiB, max: 60 * MiB }) },
    { weight: 1, arbitrary: fc.integer({ min: 60 * MiB, max: 100 * MiB }) },
  );
  type Op = { kind: 'alloc'; bytes: number } | { kind: 'free'; pick: number } | { kind: 'emptyCache' } | { kind: 'trim'; target: number };
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('alloc' as const), bytes: sizes }) },
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'emptyCache' as const }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('trim' as const), target: fc.integer({ min: 0, max: 256 * MiB }) }) },
  );

  const configs = [
    { preset: 'pytorch' as const, fragmentationLimit: Number.POSITIVE_INFINITY },
    { preset: 'pytorch' as const, fragmentationLimit: 0.005 },
    { preset: 'best' as const },
  ];
  for (const config of configs) {
    it(`maps only positive whole pages and keeps reserved bytes equal to a recount (preset ${config.preset}, fragmentationLimit ${config.fragmentationLimit ?? "default"})`, () => {
      fc.assert(
        fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
          const { allocator, check } = recordingEngine({ ...config, capacityBytes: 512 * MiB });
          const live: DataPtr[] = [];
          for (const o of ops) {
            if (o.kind === 'alloc') {
              try {
                live.push(allocator.allocate(o.bytes));
              } catch (error) {
                expect(error).to.be.instanceOf(OutOfMemoryError);
              }
            } else if (o.kind === 'free') {
              if (live.length > 0) allocator.free(live.splice(o.pick % live.length, 1)[0]!);
            } else if (o.kind === 'emptyCache') allocator.emptyCache();
            else allocator.trim(o.target);
            check();
          }
        }),
        { numRuns: 500, seed: SEED },
      );
    });
  }
});
