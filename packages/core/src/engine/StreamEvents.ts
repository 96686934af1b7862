/**
 * Stream events: stream-ordered reuse of blocks used on other streams (Note [Stream-ordered reuse]).
 *
 * - At free time, a block used on other streams (`recordStream`) gets an event recorded on each of them; under
 *   a backend with `deferredFree` (WebGPU), every freed block gets one on its own stream too.
 * - Events queue per stream, oldest first (EventQueue); a block counts its incomplete events.
 * - `process` (at the start of each allocation while any are pending) completes, per stream in order, the
 *   events that have completed, and hands each block whose last event completed back to the engine.
 * - `synchronize` (emptyCache, trim, the out-of-memory chain) waits for every pending event.
 */
import type { MemoryBackend, StreamId } from '../contracts/MemoryBackend.js';
import type { Block } from './Block.js';
import { EventQueue } from './EventQueue.js';

/**
 * Note [Stream-ordered reuse]: a block used on other streams may still be read or written by work queued on
 * them. At free time the engine records an event on each such stream; the block returns to its pool (and may
 * merge) only when all of them have completed, checked at the start of each allocation and forced by
 * emptyCache. Until then it counts as active but not allocated ("active_pending_free").
 *
 * Invariants: `pendingCount` == sum of the queues' lengths == sum of `eventCount` over all blocks; `queues`
 * holds the values of `#byStream`, each once.
 */
export class StreamEvents<H> {
  /** Per stream, events recorded at free time and the blocks waiting on them, oldest first. */
  readonly #byStream = new Map<StreamId, EventQueue<H>>();
  /** The queues of #byStream, for the hot path's loop (no Map iterator). */
  readonly #queues: EventQueue<H>[] = [];
  /** Events recorded and not yet completed, over all streams. */
  pendingCount = 0;

  constructor(
    private readonly backend: MemoryBackend<H>,
    /** Called for a block whose last event completed (CachingAllocator's #freeBlock). */
    private readonly complete: (block: Block<H>) => void,
  ) {}

  /** Records an event on each stream in `streams` (and, for a deferred-free backend, the block's own) for `block`. */
  insertEvents(block: Block<H>, streams: Set<StreamId>): void {
    if (this.backend.deferredFree) streams.add(block.stream);
    block.streamUses = null;
    for (const stream of streams) this.insertEvent(block, stream);
  }

  /** Records an event on `stream` that `block` waits for (the only one, for a deferred free used on its own stream). */
  insertEvent(block: Block<H>, stream: StreamId): void {
    const event = this.backend.recordEvent(stream);
    block.eventCount++;
    let queue = this.#byStream.get(stream);
    if (!queue) {
      this.#byStream.set(stream, (queue = new EventQueue<H>()));
      this.#queues.push(queue);
    }
    queue.push(event, block);
    this.pendingCount++;
  }

  /** Completes, per stream in order, the events that have completed; stops at a stream's first incomplete one. */
  process(): void {
    const queues = this.#queues;
    const backend = this.backend;
    for (let i = 0; i < queues.length; i++) {
      const queue = queues[i]!;
      for (let event = queue.peek(); event !== undefined && backend.isEventComplete(event); event = queue.peek()) {
        const block = queue.shift();
        this.pendingCount--;
        if (--block.eventCount === 0) this.complete(block);
      }
    }
  }

  /** Waits for every pending event and completes it. */
  synchronize(): void {
    if (this.pendingCount === 0) return;
    for (const queue of this.#queues) {
      for (let event = queue.peek(); event !== undefined; event = queue.peek()) {
        this.backend.synchronizeEvent(event); // first: should it throw, the entry is still queued and counted
        const block = queue.shift();
        this.pendingCount--;
        if (--block.eventCount === 0) this.complete(block);
      }
    }
  }

  /** Forgets every pending event (the engine is disposed). */
  clear(): void {
    this.#byStream.clear();
    this.#queues.length = 0;
    this.pendingCount = 0;
  }
}
