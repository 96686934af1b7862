/**
 * Counts `queue.submit` calls on one GPUQueue (Note [Submit epochs] in SubmitEpochs.ts) and lets the
 * backends run what they batched before anything the program puts on the queue: one wrapper of `submit` and of
 * `writeBuffer` per queue however many allocators share the device, taken off when the last one lets go.
 *
 * Note [Queue wrappers]: the wrappers are own properties of the queue object, installed over whatever was there
 * (the prototype's methods, or a program's own wrappers). When the last allocator lets go, each is put back as
 * it was if it is still the one on the queue; if the program wrapped it again in between, ours stays under the
 * program's wrapper and just passes calls through, so neither wrapper is lost.
 */
export class SubmitCounter {
  static readonly #byQueue = new WeakMap<GPUQueue, SubmitCounter>();
  /** Submits seen since the wrapper was installed. */
  count = 0;
  /** The queue's own submit, which starts no epoch. */
  readonly submitUncounted: (buffers: Iterable<GPUCommandBuffer>) => undefined;
  /**
   * Called before every counted submit and every `writeBuffer` by the program: batched copies run first. An
   * array walked by index (the program's every submit passes here, often before V8 has optimized it), replaced,
   * never changed in place, when a flush is removed: a walk in progress still reaches every flush it started with.
   */
  #beforeSubmit: (() => void)[] = [];
  #users = 0;
  #active = true;
  readonly #restore: (() => void)[] = [];

  private constructor(private readonly queue: GPUQueue) {
    const submit = queue.submit.bind(queue);
    this.submitUncounted = submit;
    this.#wrap('submit', (buffers: Iterable<GPUCommandBuffer>): undefined => {
      if (this.#active) this.#flushBatched();
      submit(buffers);
      if (this.#active) this.count++;
      return undefined;
    });
    const writeBuffer = queue.writeBuffer.bind(queue);
    this.#wrap('writeBuffer', ((...args: Parameters<GPUQueue['writeBuffer']>): undefined => {
      if (this.#active) this.#flushBatched();
      writeBuffer(...args);
      return undefined;
    }) as GPUQueue['writeBuffer']);
  }

  /** The counter of `queue`, installing its wrappers on first use; pair with `release()`. */
  static acquire(queue: GPUQueue): SubmitCounter {
    let counter = SubmitCounter.#byQueue.get(queue);
    if (!counter) SubmitCounter.#byQueue.set(queue, (counter = new SubmitCounter(queue)));
    counter.#users++;
    return counter;
  }

  /** Runs `flush` before every counted submit and program `writeBuffer` until `removeBeforeSubmit`. */
  addBeforeSubmit(flush: () => void): void {
    if (!this.#beforeSubmit.includes(flush)) this.#beforeSubmit.push(flush);
  }

  removeBeforeSubmit(flush: () => void): void {
    this.#beforeSubmit = this.#beforeSubmit.filter((f) => f !== flush);
  }

  release(): void {
    if (--this.#users > 0) return;
    this.#active = false;
    for (const restore of this.#restore) restore();
    SubmitCounter.#byQueue.delete(this.queue);
  }

  #flushBatched(): void {
    const flushes = this.#beforeSubmit;
    for (let i = 0; i < flushes.length; i++) flushes[i]!();
  }

  /** Installs `wrapper` as the queue's own `name`, remembering how to put back what was there (Note [Queue wrappers]). */
  #wrap<K extends 'submit' | 'writeBuffer'>(name: K, wrapper: GPUQueue[K]): void {
    const queue = this.queue as unknown as Record<string, unknown>;
    const hadOwn = Object.prototype.hasOwnProperty.call(queue, name);
    const previous = queue[name];
    queue[name] = wrapper;
    this.#restore.push(() => {
      if (queue[name] !== wrapper) return; // wrapped again since: ours stays, passing through
      if (hadOwn) queue[name] = previous;
      else delete queue[name]; // the prototype's shows through again
    });
  }
}
