import { expect } from 'chai';
// The pool is internal to the engine (not exported): the test reaches it through the built package.
import { Block, Segment } from '../../dist/engine/Block.js';
import { BlockPool } from '../../dist/engine/BlockPool.js';
import { MiB } from './helpers.js';

/** (size, address) order: the pool's order within a stream. */
function byKey(a: Block, b: Block): number {
  return a.size - b.size || a.address - b.address;
}

/** Checks every query of `pool` (stream 0) against `model`, the blocks it should hold. */
function expectPoolMatches(pool: BlockPool, model: readonly Block[], probes: readonly number[]): void {
  const sorted = [...model].sort(byKey);
  expect(pool.size).to.equal(sorted.length);
  expect([...pool.blocks()]).to.deep.equal(sorted);
  for (let i = 0; i < sorted.length; i++) {
    expect(pool.lower(sorted[i]!), `the block before the ${i}th`).to.equal(sorted[i - 1]);
    expect(pool.higher(sorted[i]!), `the block after the ${i}th`).to.equal(sorted[i + 1]);
  }
  for (const bytes of probes) expect(pool.lowerBound(0, bytes), `lower bound of ${bytes}`).to.equal(sorted.find((b) => b.size >= bytes));
  expect(pool.largest(0)).to.equal(sorted.at(-1));
}

describe('BlockPool across size-bucket chunk splits (Note [Size buckets])', () => {
  const segment = new Segment({ handle: null, byteOffset: 0, address: 0, byteLength: 0 }, 0, 0, false, false);

  it('keeps the order when sizes arrive ascending past several chunk splits and the last size of each chunk leaves', () => {
    const pool = new BlockPool(false);
    let model: Block[] = [];
    // Ascending sizes always land in the last chunk, which splits at 512 sizes into two of 256: chunks end at
    // multiples of 256.
    for (let size = 1; size <= 1300; size++) {
      const block = new Block(segment, 10_000 + size, size);
      pool.insert(block);
      model.push(block);
    }
    const probes = [0, 1, 255, 256, 257, 511, 512, 513, 767, 768, 769, 1024, 1299, 1300, 1301];
    expectPoolMatches(pool, model, probes);
    // The last size of each chunk, then a whole chunk.
    const leaving = model.filter((b) => b.size % 256 === 0 || (b.size > 512 && b.size <= 768));
    for (const block of leaving) pool.remove(block);
    model = model.filter((b) => !leaving.includes(b));
    expectPoolMatches(pool, model, probes);
    for (const block of leaving) pool.insert(block);
    model.push(...leaving);
    expectPoolMatches(pool, model, probes);
  });

  it('keeps the order when sizes arrive descending past chunk splits and leave from the largest down', () => {
    const pool = new BlockPool(false);
    const model: Block[] = [];
    for (let size = 1100; size >= 1; size--) {
      const block = new Block(segment, 50_000 - size, size * 512);
      pool.insert(block);
      model.push(block);
    }
    expectPoolMatches(pool, model, [0, 512, 513, 256 * 512, 256 * 512 + 1, 1100 * 512, 1100 * 512 + 1]);
    const seen: Block[] = [];
    for (let b = pool.largest(0); b !== undefined; ) {
      const lower = pool.lower(b);
      pool.remove(b);
      seen.push(b);
      b = lower;
    }
    expect(seen).to.deep.equal([...model].sort(byKey).reverse());
    expect(pool.size).to.equal(0);
    expect(pool.lowerBound(0, 0)).to.equal(undefined);
    expect(pool.largest(0)).to.equal(undefined);
  });

  it('answers a lower bound of zero or fewer bytes with the smallest block, lowest address first', () => {
    const pool = new BlockPool(false);
    const blocks = [new Block(segment, 3000, 1024), new Block(segment, 1000, 512), new Block(segment, 2000, 512)];
    for (const block of blocks) pool.insert(block);
    expect(pool.lowerBound(0, 0)).to.equal(blocks[1]);
    expect(pool.lowerBound(0, -4 * MiB), 'a gap search may start below zero').to.equal(blocks[1]);
    expect(pool.lowerBound(1, 0), 'another stream has nothing').to.equal(undefined);
  });

  it('steps through blocks of one size by address and on to the neighbouring sizes', () => {
    const pool = new BlockPool(false);
    const a = new Block(segment, 900, 64);
    const ties = [500, 100, 300].map((address) => new Block(segment, address, 128));
    const z = new Block(segment, 50, 256);
    for (const block of [a, ...ties, z]) pool.insert(block);
    const [t500, t100, t300] = ties as [Block, Block, Block];
    expect(pool.lowerBound(0, 65), 'the tie at the lowest address').to.equal(t100);
    expect(pool.lowerBound(0, 128)).to.equal(t100);
    expect(pool.higher(t100)).to.equal(t300);
    expect(pool.higher(t500)).to.equal(z);
    expect(pool.lower(t100)).to.equal(a);
    expect(pool.largest(0)).to.equal(z);
    pool.remove(t100);
    expect(pool.lowerBound(0, 128), 'the next tie by address').to.equal(t300);
    pool.remove(t500); // the bucket's first (highest address)
    pool.remove(t300); // the bucket's last: it empties
    expect(pool.lowerBound(0, 65), 'an emptied size is skipped').to.equal(z);
    expect(pool.lower(z)).to.equal(a);
    expect(pool.has(t300)).to.equal(false);
    pool.remove(t300); // not there: nothing changes
    expect(pool.size).to.equal(2);
  });
});
