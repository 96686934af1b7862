import { expect } from 'chai';
import fc from 'fast-check';
// The pool is internal to the engine (not exported): the test reaches it through the built package.
import { Block, Segment } from '../../dist/engine/Block.js';
import { BlockPool } from '../../dist/engine/BlockPool.js';

/** A model step: insert a new block, remove a pooled one (or one never pooled), or query. */
type Step =
  | { kind: 'insert'; stream: number; size: number; address: number }
  | { kind: 'remove'; pick: number }
  | { kind: 'removeAbsent'; stream: number; size: number; address: number }
  | { kind: 'lowerBound'; stream: number; bytes: number };

const SIZES = [512, 1024, 1536, 4096, 65536, 2 ** 20, 2 ** 21 + 512, 2 ** 32 + 512];
// Mostly a few sizes, so that buckets hold several blocks and searches hit them exactly.
const size = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...SIZES) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 2 ** 22 }) });
const stream = fc.integer({ min: 0, max: 2 });
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('insert' as const), stream, size, address: fc.nat({ max: 2 ** 12 }) }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('remove' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('removeAbsent' as const), stream, size, address: fc.nat({ max: 2 ** 12 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('lowerBound' as const), stream, bytes: fc.oneof(size, fc.constant(0)) }) },
);

/** (stream, size, address) order: the pool's order within a stream. */
function byKey(a: Block, b: Block): number {
  return a.stream - b.stream || a.size - b.size || a.address - b.address;
}

describe('BlockPool', () => {
  const segments = [0, 1, 2].map((s) => new Segment({ handle: null, byteOffset: 0, address: 0, byteLength: 0 }, s, 0, false, false));

  it('orders free blocks by (size, address) per stream, as a sorted list of them would, through any inserts and removes', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 300 }), (steps) => {
        const pool = new BlockPool(false);
        let model: Block[] = [];
        const keys = new Set<string>();
        for (const s of steps) {
          if (s.kind === 'insert') {
            const key = `${s.stream}:${s.size}:${s.address}`;
            if (keys.has(key)) continue; // a pool never holds two blocks of one key (they would overlap)
            keys.add(key);
            const block = new Block(segments[s.stream]!, s.address, s.size);
            pool.insert(block);
            model.push(block);
          } else if (s.kind === 'remove') {
            if (model.length === 0) continue;
            const block = model[s.pick % model.length]!;
            pool.remove(block);
            model = model.filter((b) => b !== block);
            keys.delete(`${block.stream}:${block.size}:${block.address}`);
            expect(pool.has(block)).to.equal(false);
          } else if (s.kind === 'removeAbsent') {
            pool.remove(new Block(segments[s.stream]!, s.address, s.size)); // never inserted: nothing changes
          } else {
            const expected = model.filter((b) => b.stream === s.stream && b.size >= s.bytes).sort(byKey)[0];
            expect(pool.lowerBound(s.stream, s.bytes)).to.equal(expected);
          }
          expect(pool.size).to.equal(model.length);
        }
        const sorted = [...model].sort(byKey);
        const listed = [...pool.blocks()];
        expect(listed).to.have.length(sorted.length);
        for (const seg of segments) {
          // Streams come one after another, each in (size, address) order.
          expect(listed.filter((b) => b.stream === seg.stream)).to.deep.equal(sorted.filter((b) => b.stream === seg.stream));
        }
        for (let i = 0; i < sorted.length; i++) {
          const b = sorted[i]!;
          expect(pool.has(b)).to.equal(true);
          const before = sorted[i - 1];
          const after = sorted[i + 1];
          expect(pool.lower(b)).to.equal(before?.stream === b.stream ? before : undefined);
          expect(pool.higher(b)).to.equal(after?.stream === b.stream ? after : undefined);
        }
        for (const seg of segments) {
          const mine = sorted.filter((b) => b.stream === seg.stream);
          expect(pool.largest(seg.stream)).to.equal(mine.at(-1));
        }
      }),
      { numRuns: 300 },
    );
  });

  it('keeps the order across thousands of distinct sizes, as they are added and dropped in any order', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 1, max: 1 << 24 }), { minLength: 1200, maxLength: 2500 }),
        fc.array(fc.nat(), { minLength: 600, maxLength: 1200 }),
        fc.array(fc.integer({ min: 0, max: 1 << 24 }), { maxLength: 50 }),
        (sizes, removals, probes) => {
          const pool = new BlockPool(false);
          let model = sizes.map((size, i) => new Block(segments[0]!, i, size));
          for (const block of model) pool.insert(block);
          for (const pick of removals) {
            const block = model[pick % model.length]!;
            pool.remove(block);
            model = model.filter((b) => b !== block);
          }
          const sorted = model.sort(byKey);
          expect([...pool.blocks()]).to.deep.equal(sorted);
          for (let i = 0; i < sorted.length; i++) {
            expect(pool.lower(sorted[i]!)).to.equal(sorted[i - 1]);
            expect(pool.higher(sorted[i]!)).to.equal(sorted[i + 1]);
          }
          for (const bytes of probes) expect(pool.lowerBound(0, bytes)).to.equal(sorted.find((b) => b.size >= bytes));
          expect(pool.largest(0)).to.equal(sorted.at(-1));
        },
      ),
      { numRuns: 20 },
    );
  });

  it('finds the neighbours of a block that is not in the pool by its (size, address)', () => {
    const pool = new BlockPool(false);
    const [a, b, c] = [new Block(segments[0]!, 100, 64), new Block(segments[0]!, 300, 64), new Block(segments[0]!, 0, 128)];
    for (const block of [a, b, c]) pool.insert(block);
    const probe = new Block(segments[0]!, 200, 64);
    expect(pool.lower(probe)).to.equal(a);
    expect(pool.higher(probe)).to.equal(b);
    expect(pool.higher(b)).to.equal(c);
    expect(pool.lower(a)).to.equal(undefined);
  });

  it('lets a walk from the largest block down remove each block it visits', () => {
    const pool = new BlockPool(false);
    const blocks = [8, 8, 16, 32, 32, 64].map((size, i) => new Block(segments[1]!, i * 1000, size));
    for (const block of blocks) pool.insert(block);
    const seen: Block[] = [];
    for (let b = pool.largest(1); b !== undefined; ) {
      const lower = pool.lower(b);
      pool.remove(b);
      seen.push(b);
      b = lower;
    }
    expect(seen).to.deep.equal([...blocks].sort(byKey).reverse());
    expect(pool.size).to.equal(0);
    expect(pool.lowerBound(1, 0)).to.equal(undefined);
  });
});
