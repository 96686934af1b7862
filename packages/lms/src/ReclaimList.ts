import { InvalidArgumentError } from '@stowage/core';

/**
 * The links a storage's LMS object carries so that it can sit on one {@link ReclaimList} without the list
 * allocating anything. A node is on at most one list at a time.
 */
export interface ReclaimNode {
  /** The neighbour nearer the head (less recently unpinned); null at the head or off the list. */
  reclaimPrev: ReclaimNode | null;
  /** The neighbour nearer the tail (more recently unpinned); null at the tail or off the list. */
  reclaimNext: ReclaimNode | null;
  /** The list this node is on; null when it is on none. */
  reclaimList: ReclaimList<ReclaimNode> | null;
}

/**
 * The intrusive list of Inactive storages (IBM LMS's reclaim list): a storage joins at the tail when its last pin
 * ends and leaves when it is pinned again, reclaimed or released. Insert and remove are O(1) and allocate nothing:
 * the links live in the nodes. Iteration runs from the head, the least recently unpinned, which is where the
 * `lru` policy looks first.
 *
 * Invariants: `size` == number of nodes reachable from `head`; for every node n on the list,
 * n.reclaimList === this, n.reclaimNext?.reclaimPrev === n and n.reclaimPrev?.reclaimNext === n; head.reclaimPrev
 * and tail.reclaimNext are null; a node off every list has all three links null.
 */
export class ReclaimList<N extends ReclaimNode> {
  #head: N | null = null;
  #tail: N | null = null;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** The least recently inserted node, or null when empty. */
  get head(): N | null {
    return this.#head;
  }

  /** The most recently inserted node, or null when empty. */
  get tail(): N | null {
    return this.#tail;
  }

  /** True when `node` is on this list. O(1). */
  has(node: N): boolean {
    return node.reclaimList === (this as ReclaimList<ReclaimNode>);
  }

  /**
   * Appends `node` at the tail (it is now the most recently unpinned). O(1).
   * @throws InvalidArgumentError when the node is already on a list (an LMS object joins the list once per unpin
   * to zero); nothing changes
   */
  pushBack(node: N): void {
    if (node.reclaimList !== null) {
      throw new InvalidArgumentError('node', 'a node already on a reclaim list', 'a node on no reclaim list (an LMS object joins the list once per unpin to zero)');
    }
    node.reclaimList = this as ReclaimList<ReclaimNode>;
    node.reclaimPrev = this.#tail;
    node.reclaimNext = null;
    if (this.#tail) this.#tail.reclaimNext = node;
    else this.#head = node;
    this.#tail = node;
    this.#size++;
  }

  /** Takes `node` off this list; returns false (and changes nothing) when it is not on it. O(1). */
  remove(node: N): boolean {
    if (node.reclaimList !== (this as ReclaimList<ReclaimNode>)) return false;
    const prev = node.reclaimPrev as N | null;
    const next = node.reclaimNext as N | null;
    if (prev) prev.reclaimNext = next;
    else this.#head = next;
    if (next) next.reclaimPrev = prev;
    else this.#tail = prev;
    node.reclaimPrev = null;
    node.reclaimNext = null;
    node.reclaimList = null;
    this.#size--;
    return true;
  }

  /**
   * The nodes from head to tail. Removing the node just yielded (a policy reclaiming it) is safe and the walk goes
   * on with its successor; other changes to the list during a walk are not supported.
   */
  *[Symbol.iterator](): IterableIterator<N> {
    let node = this.#head;
    while (node) {
      const next = node.reclaimNext as N | null;
      yield node;
      node = node.reclaimList === (this as ReclaimList<ReclaimNode>) ? (node.reclaimNext as N | null) : next;
    }
  }
}
