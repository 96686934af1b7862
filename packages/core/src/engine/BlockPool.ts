import btree from 'sorted-btree';
import type { StreamId } from '../MemoryBackend.js';
import type { Block } from './Block.js';

// sorted-btree is CommonJS with `exports.default`: under Node's ESM loader the default import is the module.
const BTree = btree.default;
type Tree<H> = InstanceType<typeof btree.default<Block<H>, undefined>>;

/** Orders free blocks of one stream by (size, address): lower bound on size is best fit, lowest address first. */
function bySizeThenAddress<H>(a: Block<H>, b: Block<H>): number {
  return a.size - b.size || a.address - b.address;
}

/**
 * Note [Tree shapes that never die]: the B-tree's leaf and internal nodes are objects of two classes whose hidden
 * classes V8 compiles the pool's lookups against and holds weakly (as Note [A DataPtr that never dies] in
 * DataPtr.ts). A pool's tree shrinks to a single leaf whenever a program's step ends with everything freed, so
 * at the next garbage collection its internal nodes' hidden classes died and the compiled lookups were thrown
 * away, and compiled again once the trees grew back. One tree with internal nodes, made with the first pool and
 * held by the BlockPool class, keeps those classes alive; it holds blocks of no memory, copies of that pool's
 * probe (of a segment of no memory). Measured with `--trace-opt --trace-deopt` over the WebGPU bench's cold,
 * warm and next pass of one trace (three runs each): deoptimizations 0–1 per pass instead of 6–7 in the warm
 * pass, TurboFan compiles in the warm pass 17–21 instead of 21–32.
 */
function keepTreeShapes<H>(probe: Block<H>): Tree<H> {
  const tree = new BTree<Block<H>, undefined>(undefined, bySizeThenAddress<H>);
  const BlockClass = probe.constructor as new (segment: Block<H>['segment'], address: number, size: number) => Block<H>;
  for (let address = 0; address < 256; address++) tree.set(new BlockClass(probe.segment, address, 1), undefined);
  return tree;
}

/**
 * The free blocks of one pool (small or large), one ordered tree per stream: best fit ordered by
 * (stream, size, address), as in PyTorch.
 *
 * Invariants: a block is in at most one tree, the one of its stream; every block in a tree is free.
 */
export class BlockPool<H = unknown> {
  /** Note [Tree shapes that never die]: made with the first pool, from its probe's class and segment. */
  private static treeShapes: unknown;
  readonly #trees = new Map<StreamId, Tree<H>>();
  /**
   * The key of lower-bound searches: a real Block (never in a tree), so that the comparator only ever sees
   * Blocks and V8 compiles it for one hidden class (a plain object here made it polymorphic and deoptimized it).
   */
  readonly #probe: Block<H>;
  /** Free-block searches so far; ages cached blocks for garbage collection. */
  searchCount = 0;
  #size = 0;

  constructor(
    readonly small: boolean,
    probe: Block<H>,
  ) {
    this.#probe = probe;
    BlockPool.treeShapes ??= keepTreeShapes(probe);
  }

  /** Number of free blocks. */
  get size(): number {
    return this.#size;
  }

  insert(block: Block<H>): void {
    let tree = this.#trees.get(block.stream);
    if (!tree) this.#trees.set(block.stream, (tree = new BTree<Block<H>, undefined>(undefined, bySizeThenAddress<H>)));
    tree.set(block, undefined);
    block.gcCountBase = this.searchCount;
    this.#size++;
  }

  remove(block: Block<H>): void {
    if (this.#trees.get(block.stream)?.delete(block)) this.#size--;
  }

  has(block: Block<H>): boolean {
    return this.#trees.get(block.stream)?.has(block) ?? false;
  }

  /** The smallest free block of `stream` with at least `bytes`, lowest address first; undefined when none. */
  lowerBound(stream: StreamId, bytes: number): Block<H> | undefined {
    const tree = this.#trees.get(stream);
    if (!tree) return undefined;
    this.#probe.size = bytes;
    this.#probe.address = -1;
    return tree.getPairOrNextHigher(this.#probe)?.[0];
  }

  /** The next smaller free block of the same stream, in (size, address) order. */
  lower(block: Block<H>): Block<H> | undefined {
    return this.#trees.get(block.stream)?.nextLowerPair(block)?.[0];
  }

  /** The next larger free block of the same stream, in (size, address) order. */
  higher(block: Block<H>): Block<H> | undefined {
    return this.#trees.get(block.stream)?.nextHigherPair(block)?.[0];
  }

  clear(): void {
    this.#trees.clear();
    this.#size = 0;
  }

  /** The largest free block of `stream`. */
  largest(stream: StreamId): Block<H> | undefined {
    return this.#trees.get(stream)?.maxKey();
  }

  /** Every free block, stream by stream in (size, address) order; safe to remove the yielded block. */
  *blocks(): IterableIterator<Block<H>> {
    for (const tree of this.#trees.values()) yield* [...tree.keys()];
  }
}
