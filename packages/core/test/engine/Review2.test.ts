import { expect } from 'chai';
import fc from 'fast-check';
import type { CachingAllocatorOptions, DataPtr } from '@stowage/core';
import { OutOfMemoryError } from '@stowage/core';
import type { EngineStep } from './helpers.js';
import { applyEngineStep, engine, expectSnapshotCoversReserved, MiB } from './helpers.js';

/** Live pointers never overlap. */
function expectDisjoint(ptrs: readonly DataPtr[]): void {
  const ranges = ptrs.filter((p) => !p.isReleased && p.byteLength > 0).map((p) => [p.address, p.address + p.byteLength] as const);
  ranges.sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < ranges.length; i++) expect(ranges[i]![0], 'overlapping allocations').to.be.at.least(ranges[i - 1]![1]);
}

describe('CachingAllocator fragmentation sweep at a new peak (re-entrant listeners)', () => {
  it('does not unmap a block that a segmentReleased listener allocated during the sweep', () => {
    const { allocator, backend } = engine({ preset: 'best' });
    const a = allocator.allocate(4 * MiB); // [0, 4)
    const b = allocator.allocate(4 * MiB); // [4, 8)
    const c = allocator.allocate(4 * MiB); // [8, 12)
    allocator.free(a);
    allocator.free(c); // the tail: a 4 MiB free block at [8, 12), another at [0, 4)
    const fromListener: DataPtr[] = [];
    allocator.events.on('segmentReleased', () => {
      if (fromListener.length === 0) fromListener.push(allocator.allocate(4 * MiB)); // takes the block the sweep visits next
    });
    // A new live peak (4 + 20 > 12 MiB) with 8 MiB free: the sweep unmaps the free blocks, largest first.
    const e = allocator.allocate(20 * MiB);
    expect(fromListener).to.have.length(1);
    allocator.assertInvariants();
    expectDisjoint([b, e, ...fromListener]);
    expect(backend.reservedBytes, 'the backend holds what the engine counts as reserved').to.equal(allocator.reservedBytes);
  });

  it('does not unmap a block that merged away when a segmentReleased listener freed its neighbour during the sweep', () => {
    const { allocator, backend } = engine({ preset: 'best' });
    const a = allocator.allocate(4 * MiB); // [0, 4)
    const b = allocator.allocate(4 * MiB); // [4, 8)
    const c = allocator.allocate(4 * MiB); // [8, 12)
    const d = allocator.allocate(4 * MiB); // [12, 16)
    allocator.free(a);
    allocator.free(c);
    let freedInListener = false;
    allocator.events.on('segmentReleased', () => {
      if (freedInListener) return;
      freedInListener = true;
      allocator.free(b); // merges with the free block [0, 4) that the sweep visits next
    });
    const e = allocator.allocate(24 * MiB); // a new live peak: 4 + 4 + 24 > 16 MiB
    expect(freedInListener).to.equal(true);
    allocator.assertInvariants();
    expectDisjoint([d, e]);
    expect(backend.reservedBytes, 'the backend holds what the engine counts as reserved').to.equal(allocator.reservedBytes);
  });

  it('does not return a segment twice when a listener allocation swept it during the sweep over every segment', () => {
    const { allocator, backend } = engine({ preset: 'best' }, { streams: 2 });
    const x = allocator.allocate(4 * MiB, { stream: 0 }); // segment X (stream 0)
    const y = allocator.allocate(4 * MiB, { stream: 1 }); // segment Y (stream 1)
    const x2 = allocator.allocate(4 * MiB, { stream: 0 });
    allocator.free(x); // a free block of whole pages in X
    allocator.free(y); // Y holds nothing live
    const fromListener: DataPtr[] = [];
    let nested = false;
    allocator.events.on('segmentReleased', () => {
      if (nested) return;
      nested = true;
      // Another new live peak: its own sweep unmaps Y and returns it, while the outer sweep still lists Y.
      fromListener.push(allocator.allocate(32 * MiB, { stream: 0 }));
    });
    const big = allocator.allocate(16 * MiB, { stream: 0 }); // new live peak: sweeps X, then Y
    expect(fromListener).to.have.length(1);
    allocator.assertInvariants();
    expectSnapshotCoversReserved(allocator);
    expect(backend.reservedBytes).to.equal(allocator.reservedBytes);
    allocator.free(x2);
    allocator.free(big);
    allocator.free(fromListener[0]!);
    allocator.emptyCache();
    allocator.assertInvariants();
    expect(allocator.memoryStats()['segment.all.current']).to.equal(0);
    expect(allocator.reservedBytes).to.equal(0);
  });

  it('keeps the segment that a segmentReleased listener grew while the sweep was returning the old one', () => {
    const { allocator, backend } = engine({ preset: 'best' }, { streams: 2 });
    const small = allocator.allocate(1); // stream 0: one page mapped
    let nested: DataPtr | undefined;
    let once = false;
    allocator.events.on('segmentReleased', () => {
      if (once) return;
      once = true;
      nested = allocator.allocate(2 * MiB + 1); // stream 0 again: its own sweep returns the emptied segment, then a new one
    });
    allocator.free(small);
    const other = allocator.allocate(1, { stream: 1 }); // a new mapped peak: sweeps stream 0's free page
    expect(nested).to.not.equal(undefined);
    allocator.assertInvariants();
    allocator.free(nested!);
    allocator.free(other);
    allocator.emptyCache();
    expect(allocator.reservedBytes, 'emptyCache with nothing live returns every page').to.equal(0);
    expect(backend.reservedBytes).to.equal(0);
    expect(allocator.memoryStats()['segment.all.current']).to.equal(0);
  });
});

/** One step of a random program; `onEvent` arms a one-shot listener that allocates or frees. */
type ListenedEvent = 'allocated' | 'freed' | 'segmentReserved' | 'segmentReleased';
type Op =
  | EngineStep
  | { kind: 'onEvent'; event: ListenedEvent; action: 'alloc' | 'free'; bytes: number; pick: number };

const sizes = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 1, max: 64 * 1024 }) },
  { weight: 3, arbitrary: fc.integer({ min: 64 * 1024, max: 2 * MiB }) },
  { weight: 3, arbitrary: fc.integer({ min: 2 * MiB, max: 24 * MiB }) },
);

function program(events: readonly ListenedEvent[]): fc.Arbitrary<Op[]> {
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 10, arbitrary: fc.record({ kind: fc.constant('alloc' as const), bytes: sizes, stream: fc.integer({ min: 0, max: 1 }) }) },
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'emptyCache' as const }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('trim' as const), target: fc.integer({ min: 0, max: 64 * MiB }) }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('recordStream' as const), pick: fc.nat(), stream: fc.integer({ min: 0, max: 1 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('hold' as const), stream: fc.integer({ min: 0, max: 1 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('complete' as const), stream: fc.integer({ min: 0, max: 1 }) }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('onEvent' as const),
        event: fc.constantFrom(...events),
        action: fc.constantFrom('alloc' as const, 'free' as const),
        bytes: sizes,
        pick: fc.nat(),
      }),
    },
  );
  return fc.array(op, { maxLength: 80 });
}

/**
 * Runs `ops`, checking after each step: the engine's invariants, live pointers disjoint, segment and allocation
 * counts against a recount, the backend's bytes, and segmentReserved minus segmentReleased bytes against
 * reserved bytes (no event lost, doubled or left queued).
 */
function runWithListeners(options: CachingAllocatorOptions, ops: readonly Op[], capacityBytes: number): void {
  const { allocator, backend } = engine(options, { streams: 2, capacityBytes });
  const live: DataPtr[] = [];
  let eventBytes = 0;
  allocator.events.on('segmentReserved', (e) => (eventBytes += e.bytes));
  allocator.events.on('segmentReleased', (e) => (eventBytes -= e.bytes));
  const errors: unknown[] = [];
  allocator.events.on('listenerFailed', (e) => errors.push(e.error));
  let inListener = false;
  let done = false;
  for (const o of ops) {
    switch (o.kind) {
      case 'onEvent':
        allocator.events.once(o.event, () => {
          if (inListener || done) return;
          inListener = true;
          try {
            if (o.action === 'alloc') live.push(allocator.allocate(o.bytes));
            else if (live.length > 0) allocator.free(live.splice(o.pick % live.length, 1)[0]!);
          } catch (error) {
            if (!(error instanceof OutOfMemoryError)) throw error;
          } finally {
            inListener = false;
          }
        });
        break;
      default:
        applyEngineStep(allocator, backend, live, o);
    }
    expect(errors, 'listeners never see an engine error').to.deep.equal([]);
    allocator.assertInvariants();
    expectDisjoint(live);
    const s = allocator.memoryStats();
    expect(s['allocation.all.current']).to.equal(live.length);
    expectSnapshotCoversReserved(allocator);
    expect(backend.reservedBytes, 'the backend holds what the engine counts as reserved').to.equal(allocator.reservedBytes);
    expect(eventBytes, 'segmentReserved minus segmentReleased bytes equal reserved bytes').to.equal(allocator.reservedBytes);
  }
  done = true;
  for (const ptr of live.splice(0)) allocator.free(ptr);
  backend.completeStream(0);
  backend.completeStream(1);
  allocator.emptyCache();
  allocator.assertInvariants();
  expect(allocator.reservedBytes, 'freeing everything and emptyCache returns reserved to zero').to.equal(0);
  expect(eventBytes).to.equal(0);
}

describe('CachingAllocator under random programs with listeners that allocate and free', function () {
  this.timeout(60_000);
  const runs = [
    ['pytorch', 160 * MiB],
    ['best', 160 * MiB],
    ['best', 48 * MiB], // the out-of-memory chain: release the cache and retry
  ] as const;
  for (const [preset, capacity] of runs) {
    it(`keeps invariants and event accounting with allocated, freed and segmentReserved listeners (${preset} preset, ${capacity / MiB} MiB)`, () => {
      fc.assert(
        fc.property(program(['allocated', 'freed', 'segmentReserved']), (ops) => runWithListeners({ preset }, ops, capacity)),
        { numRuns: 300 },
      );
    });
  }

  for (const preset of ['pytorch', 'best'] as const) {
    it(`keeps invariants and event accounting with segmentReleased listeners (${preset} preset)`, () => {
      fc.assert(fc.property(program(['segmentReleased']), (ops) => runWithListeners({ preset }, ops, 160 * MiB)), { numRuns: 1000 });
    });
  }
});
