import { expect } from 'chai';
import fc from 'fast-check';
import type { CachingAllocatorOptions, DataPtr } from '@stowage/core';
import { OutOfMemoryError } from '@stowage/core';
import type { EngineStep } from './helpers.js';
import { applyEngineStep, engine, expectDisjoint, expectSnapshotCoversReserved, MiB } from './helpers.js';

/** One step of a random program; `onEvent` arms a one-shot listener that allocates or frees. */
type ListenedEvent = 'allocated' | 'freed' | 'freeCompleted' | 'segmentReserved' | 'segmentReleased';
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
  let pendingFrees = 0;
  allocator.events.on('freed', (e) => void (e.pending === true && pendingFrees++));
  allocator.events.on('freeCompleted', () => void pendingFrees--);
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
    const pendingBlocks = allocator.snapshot().segments.reduce((n, seg) => n + seg.blocks.filter((b) => b.state === 'active_pending_free').length, 0);
    expect(pendingFrees, 'pending frees minus freeCompleted equal the blocks pending free').to.equal(pendingBlocks);
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

  it('keeps invariants and event accounting with freed and freeCompleted listeners (pytorch preset)', () => {
    fc.assert(fc.property(program(['freed', 'freeCompleted']), (ops) => runWithListeners({ preset: 'pytorch' }, ops, 160 * MiB)), { numRuns: 300 });
  });

  for (const preset of ['pytorch', 'best'] as const) {
    it(`keeps invariants and event accounting with segmentReleased listeners (${preset} preset)`, () => {
      fc.assert(fc.property(program(['segmentReleased']), (ops) => runWithListeners({ preset }, ops, 160 * MiB)), { numRuns: 1000 });
    });
  }
});
