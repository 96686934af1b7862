/**
 * Counts `queue.submit` calls on one GPUQueue (Note [Submit epochs] in WebGpuMemoryBackend.ts). One counting
 * wrapper per queue however many allocators share the device; it is removed when the last one lets go.
 */
export class SubmitCounter {
  static readonly #byQueue = new WeakMap<GPUQueue, SubmitCounter>();
  /** Submits seen since the wrapper was installed. */
  count = 0;
  /** The queue's own submit, which starts no epoch. */
  readonly submitUncounted: (buffers: Iterable<GPUCommandBuffer>) => undefined;
  #users = 0;
  /** Called before every counted submit: backends submit the copies they batched, so they run first. */
  readonly beforeSubmit = new Set<() => void>();

  private constructor(private readonly queue: GPUQueue) {
    const submit = queue.submit.bind(queue);
    this.submitUncounted = submit;
    queue.submit = (buffers: Iterable<GPUCommandBuffer>): undefined => {
      for (const flush of this.beforeSubmit) flush();
      submit(buffers);
      this.count++;
      return undefined;
    };
  }

  /** The counter of `queue`, installing its wrapper on first use; pair with `release()`. */
  static acquire(queue: GPUQueue): SubmitCounter {
    let counter = SubmitCounter.#byQueue.get(queue);
    if (!counter) SubmitCounter.#byQueue.set(queue, (counter = new SubmitCounter(queue)));
    counter.#users++;
    return counter;
  }

  release(): void {
    if (--this.#users > 0) return;
    delete (this.queue as { submit?: unknown }).submit; // the prototype's submit shows through again
    SubmitCounter.#byQueue.delete(this.queue);
  }
}
