import type { BackendEvent } from '../contracts/MemoryBackend.js';
import type { Block } from './Block.js';

/**
 * The events one stream recorded at free time and the blocks waiting on each, oldest first (Note [Stream-ordered
 * reuse] in StreamEvents.ts). Two parallel arrays between a head and a tail index that restart at 0 whenever
 * the queue empties: the hot path of a deferred free (one push, one shift a little later) allocates nothing and
 * grows an array only when half of it is in use.
 *
 * Invariant: the waiting entries are `events[head..tail)` and `blocks[head..tail)`; slots outside hold undefined.
 */
export class EventQueue<H> {
  readonly #events: (BackendEvent | undefined)[] = [];
  readonly #blocks: (Block<H> | undefined)[] = [];
  #head = 0;
  #tail = 0;

  get length(): number {
    return this.#tail - this.#head;
  }

  push(event: BackendEvent, block: Block<H>): void {
    // At the end of the arrays with at least half of them free at the front: move down (amortised O(1)); else
    // the writes below append.
    if (this.#head > 0 && this.#tail === this.#events.length && this.#head * 2 >= this.#tail) this.#compact();
    this.#events[this.#tail] = event;
    this.#blocks[this.#tail] = block;
    this.#tail++;
  }

  /** The oldest event; undefined when none waits. */
  peek(): BackendEvent | undefined {
    return this.#head < this.#tail ? this.#events[this.#head] : undefined;
  }

  /** Removes the oldest entry and returns its block. The caller checked (peek) that one waits. */
  shift(): Block<H> {
    const head = this.#head;
    const block = this.#blocks[head]!;
    this.#events[head] = undefined; // keep nothing alive that moved on
    this.#blocks[head] = undefined;
    this.#head = head + 1;
    if (this.#head === this.#tail) this.#head = this.#tail = 0;
    return block;
  }

  /** Moves the waiting entries to the front, making room at the back without growing. */
  #compact(): void {
    const n = this.#tail - this.#head;
    for (let i = 0; i < n; i++) {
      this.#events[i] = this.#events[this.#head + i];
      this.#blocks[i] = this.#blocks[this.#head + i];
    }
    for (let i = n; i < this.#tail; i++) {
      this.#events[i] = undefined;
      this.#blocks[i] = undefined;
    }
    this.#head = 0;
    this.#tail = n;
  }
}
