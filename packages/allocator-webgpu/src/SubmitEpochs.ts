import type { BackendEvent, StreamId } from '@stowage/core/plugin-kit';
import type { SubmitCounter } from './SubmitCounter.js';

interface EpochEvent extends BackendEvent {
  /** The submit count when the free was recorded: complete once a submit moved past it. */
  readonly epoch: number;
  /** The synchronizations before it: complete once another one forced it (synchronize). */
  readonly generation: number;
}

/**
 * The events of one WebGPU backend's deferred frees.
 *
 * Note [Submit epochs]: a tensor program records command encoders and submits them later. A block freed between
 * recording and submitting may still be read by that work, while `queue.writeBuffer` for its next owner would
 * run at once on the queue timeline, before the encoder. So frees are deferred (`deferredFree`): the event a
 * free records is the current submit count, and it completes at the next `queue.submit` by anyone. The
 * backend counts submits by wrapping `device.queue.submit` once per queue (SubmitCounter; removed when the last backend is disposed); its own transfers submit
 * through the unwrapped function and start no epoch. `synchronizeEvent` (emptyCache, the out-of-memory path)
 * completes the events this backend recorded so far without a submit: work recorded before it and submitted
 * after it is the caller's risk under memory pressure. A free after it waits for the next submit as usual (each
 * event carries the number of synchronizations before it). Other backends on the queue are not affected.
 *
 * Note [Frees after their submit]: a program that itself holds a release until the submit that used the block
 * (TensorFlow.js's WebGPU backend frees a tensor's memory only after `queue.submit` of the last command buffer
 * that bound it, or at once when nothing recorded since the last submit bound it) would otherwise wait twice: its
 * free, made right after that submit, waits for the next one. `freeingSubmitted(release)` records the frees made
 * inside `release` with the previous epoch's event, which is complete: the next allocation may reuse the block.
 * That is the caller's promise that no unsubmitted encoder names the block; a `queue.writeBuffer` for its next
 * owner then runs after every command buffer that used it.
 *
 * Invariants: every event this returns has epoch <= counter.count and generation <= synchronized; an event is
 * complete once either moved past it.
 */
export class SubmitEpochs {
  /** The event of the current epoch, once a free recorded it. */
  #lastEvent: EpochEvent | null = null;
  /** Depth of `freeingSubmitted` calls in progress: frees inside are already ordered after their last use. */
  #submittedFrees = 0;
  /** Synchronizations so far: events of earlier generations are complete though no submit ended them. */
  #synchronized = 0;

  constructor(private readonly counter: SubmitCounter) {}

  /**
   * Runs `release` with every free it makes treated as ordered after the last submit (Note [Frees after their
   * submit]): their blocks are reusable by the next allocation, without waiting for another submit.
   */
  freeingSubmitted<T>(release: () => T): T {
    this.#submittedFrees++;
    try {
      return release();
    } finally {
      this.#submittedFrees--;
    }
  }

  /**
   * Every free of one epoch and generation records the same event (they are immutable): no object per free.
   * Inside `freeingSubmitted` the event is the previous epoch's, complete already.
   */
  record(stream: StreamId): BackendEvent {
    const epoch = this.#submittedFrees > 0 ? this.counter.count - 1 : this.counter.count;
    const generation = this.#synchronized;
    let event = this.#lastEvent;
    if (event === null || event.epoch !== epoch || event.generation !== generation) this.#lastEvent = event = { stream, epoch, generation };
    return event;
  }

  isComplete(event: BackendEvent): boolean {
    const e = event as EpochEvent;
    return this.counter.count > e.epoch || this.#synchronized > e.generation;
  }

  /**
   * Completes `event` without a submit (emptyCache, the out-of-memory path), and with it every event this backend
   * recorded before. Only those: a free recorded afterwards, in the same submit epoch, still waits for the next
   * submit (work the program records after the synchronization may read it). Only this backend's: the submit count
   * other allocators on the queue read is not touched, so their pending frees still wait for a real submit.
   */
  synchronize(event: BackendEvent): void {
    if ((event as EpochEvent).generation === this.#synchronized) this.#synchronized++;
  }
}
