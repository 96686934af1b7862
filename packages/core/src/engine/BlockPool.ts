import type { StreamId } from '../contracts/MemoryBackend.js';
import type { Block } from './Block.js';

/**
 * Note [Size buckets]: a pool orders the free blocks of each stream by (size, address), as PyTorch's block set
 * does, so that a lower bound on size is the best fit at the lowest address. It keeps them as buckets of one
 * exact size each, sorted by address (descending, so that the best fit is last), and the sorted sizes whose
 * buckets are not empty.
 *
 * - A tensor program asks for the same few sizes over and over, so most searches hit a bucket of exactly the
 *   requested size: one Map lookup. Only a miss binary-searches the sizes (in chunks: SortedSizes).
 * - Inserting or removing a block binary-searches its bucket (most hold one block or a handful), and changes
 *   the sizes only when a bucket fills or empties.
 *
 * The order is that of a (stream, size, address) tree, so placement is the same as with one. The pool is not a
 * generic ordered tree because such code (a comparator call per step, a range edit behind every delete) is slow
 * until V8 optimizes it, and is among the last functions V8 optimizes (figures: packages/core/README.md).
 */
/** Empty buckets kept for reuse, beyond which an emptying bucket is dropped instead. */
const SPARE_BUCKETS = 64;
/** Sizes per chunk of a SortedSizes after a split; a chunk splits when it reaches twice this. */
const CHUNK_SIZES = 256;

/** The first index of `sizes` (ascending) whose value is at least `bytes`; `sizes.length` when none. */
function firstSizeAtLeast(sizes: readonly number[], bytes: number): number {
  let lo = 0;
  let hi = sizes.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sizes[mid]! < bytes) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The first index of `bucket` (descending by address) whose address is at most `address`. */
function firstAddressAtMost<H>(bucket: readonly Block<H>[], address: number): number {
  let lo = 0;
  let hi = bucket.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (bucket[mid]!.address > address) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Distinct sizes in ascending order, as sorted chunks of at most 2 × CHUNK_SIZES, so that adding or dropping a
 * size moves a few hundred numbers however many sizes there are (a program with a hundred thousand live blocks
 * leaves tens of thousands of distinct free sizes; one sorted array made each change cost microseconds).
 */
class SortedSizes {
  readonly #chunks: number[][] = [];
  #count = 0;

  /** How many sizes there are. */
  get count(): number {
    return this.#count;
  }

  /** The index of the first chunk whose largest size is at least `bytes`; the chunk count when none. */
  #chunkFor(bytes: number): number {
    const chunks = this.#chunks;
    let lo = 0;
    let hi = chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const chunk = chunks[mid]!;
      if (chunk[chunk.length - 1]! < bytes) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Adds a size that is not there. */
  add(size: number): void {
    const chunks = this.#chunks;
    this.#count++;
    if (chunks.length === 0) {
      chunks.push([size]);
      return;
    }
    const c = Math.min(this.#chunkFor(size), chunks.length - 1);
    const chunk = chunks[c]!;
    chunk.splice(firstSizeAtLeast(chunk, size), 0, size);
    if (chunk.length >= 2 * CHUNK_SIZES) chunks.splice(c + 1, 0, chunk.splice(CHUNK_SIZES));
  }

  /** Drops a size that is there. */
  delete(size: number): void {
    const c = this.#chunkFor(size);
    const chunk = this.#chunks[c]!;
    chunk.splice(firstSizeAtLeast(chunk, size), 1);
    this.#count--;
    if (chunk.length === 0) this.#chunks.splice(c, 1);
  }

  /** The smallest size of at least `bytes`; undefined when none. */
  atLeast(bytes: number): number | undefined {
    const c = this.#chunkFor(bytes);
    if (c === this.#chunks.length) return undefined;
    const chunk = this.#chunks[c]!;
    return chunk[firstSizeAtLeast(chunk, bytes)];
  }

  /** The largest size below `bytes`; undefined when none. */
  below(bytes: number): number | undefined {
    const c = this.#chunkFor(bytes);
    const chunk = this.#chunks[c];
    if (chunk !== undefined) {
      const at = firstSizeAtLeast(chunk, bytes);
      if (at > 0) return chunk[at - 1];
    }
    return this.#chunks[c - 1]?.at(-1);
  }

  /** The largest size; undefined when none. */
  max(): number | undefined {
    return this.#chunks.at(-1)?.at(-1);
  }

  /** The sizes in ascending order. */
  *[Symbol.iterator](): IterableIterator<number> {
    for (const chunk of this.#chunks) yield* chunk;
  }
}

class StreamBlocks<H> {
  /** The sizes whose buckets hold blocks. */
  readonly sizes = new SortedSizes();
  /** Blocks by exact size, each bucket descending by address (the best fit last); a bucket may be empty (kept for reuse). */
  readonly buckets = new Map<number, Block<H>[]>();
}

/**
 * The free blocks of one pool (small or large), per stream in (size, address) order: best fit at the lowest
 * address, as in PyTorch (Note [Size buckets]).
 *
 * Invariants: a block is in at most one pool, in its stream's bucket of its size; every block in a pool is free;
 * a block's size and address do not change while it is in a pool.
 */
export class BlockPool<H = unknown> {
  readonly #streams = new Map<StreamId, StreamBlocks<H>>();
  /** Free-block searches so far; ages cached blocks for garbage collection. */
  searchCount = 0;
  #size = 0;

  constructor(readonly small: boolean) {}

  /** Number of free blocks. */
  get size(): number {
    return this.#size;
  }

  insert(block: Block<H>): void {
    const size = block.size;
    let blocks = this.#streams.get(block.stream);
    if (blocks === undefined) this.#streams.set(block.stream, (blocks = new StreamBlocks<H>()));
    let bucket = blocks.buckets.get(size);
    if (bucket === undefined) blocks.buckets.set(size, (bucket = []));
    if (bucket.length === 0) blocks.sizes.add(size);
    const at = firstAddressAtMost(bucket, block.address);
    if (at === bucket.length) bucket.push(block);
    else bucket.splice(at, 0, block);
    block.gcCountBase = this.searchCount;
    this.#size++;
  }

  /** Removes `block` when it is in the pool; nothing otherwise. */
  remove(block: Block<H>): void {
    const blocks = this.#streams.get(block.stream);
    const bucket = blocks?.buckets.get(block.size);
    if (blocks === undefined || bucket === undefined) return;
    const at = firstAddressAtMost(bucket, block.address);
    if (bucket[at] !== block) return;
    if (at === bucket.length - 1) bucket.pop();
    else bucket.splice(at, 1);
    this.#size--;
    if (bucket.length === 0) this.#dropSize(blocks, block.size);
  }

  has(block: Block<H>): boolean {
    const bucket = this.#streams.get(block.stream)?.buckets.get(block.size);
    return bucket !== undefined && bucket[firstAddressAtMost(bucket, block.address)] === block;
  }

  /** The smallest free block of `stream` with at least `bytes`, lowest address first; undefined when none. */
  lowerBound(stream: StreamId, bytes: number): Block<H> | undefined {
    const blocks = this.#streams.get(stream);
    if (blocks === undefined) return undefined;
    const exact = blocks.buckets.get(bytes);
    if (exact !== undefined && exact.length > 0) return exact[exact.length - 1];
    const size = blocks.sizes.atLeast(bytes);
    return size === undefined ? undefined : blocks.buckets.get(size)!.at(-1);
  }

  /** The free block of the same stream just before `block` in (size, address) order; `block` need not be pooled. */
  lower(block: Block<H>): Block<H> | undefined {
    const blocks = this.#streams.get(block.stream);
    if (blocks === undefined) return undefined;
    const bucket = blocks.buckets.get(block.size);
    if (bucket !== undefined) {
      const at = firstAddressAtMost(bucket, block.address - 1);
      if (at < bucket.length) return bucket[at];
    }
    const size = blocks.sizes.below(block.size);
    return size === undefined ? undefined : blocks.buckets.get(size)![0];
  }

  /** The free block of the same stream just after `block` in (size, address) order; `block` need not be pooled. */
  higher(block: Block<H>): Block<H> | undefined {
    const blocks = this.#streams.get(block.stream);
    if (blocks === undefined) return undefined;
    const bucket = blocks.buckets.get(block.size);
    if (bucket !== undefined) {
      const at = firstAddressAtMost(bucket, block.address);
      if (at > 0) return bucket[at - 1];
    }
    const size = blocks.sizes.atLeast(block.size + 1);
    return size === undefined ? undefined : blocks.buckets.get(size)!.at(-1);
  }

  clear(): void {
    this.#streams.clear();
    this.#size = 0;
  }

  /** The largest free block of `stream`. */
  largest(stream: StreamId): Block<H> | undefined {
    const blocks = this.#streams.get(stream);
    const size = blocks?.sizes.max();
    return size === undefined ? undefined : blocks!.buckets.get(size)![0];
  }

  /** Every free block, stream by stream in (size, address) order; safe to remove the yielded block. */
  *blocks(): IterableIterator<Block<H>> {
    const all: Block<H>[] = [];
    for (const blocks of this.#streams.values()) for (const size of blocks.sizes) {
        const bucket = blocks.buckets.get(size)!;
        for (let i = bucket.length - 1; i >= 0; i--) all.push(bucket[i]!);
      }
    yield* all;
  }

  /** A bucket emptied: its size leaves the sizes array; the bucket stays for reuse unless too many are spare. */
  #dropSize(blocks: StreamBlocks<H>, size: number): void {
    blocks.sizes.delete(size);
    if (blocks.buckets.size > blocks.sizes.count + SPARE_BUCKETS) blocks.buckets.delete(size);
  }
}
