/**
 * The process's resident memory above a baseline. On a software WebGPU driver (SwiftShader, llvmpipe) device
 * memory is ordinary process memory, so this is what the allocations really cost, the driver's own rounding and
 * per-buffer bookkeeping included. Sampling reads /proc (`process.memoryUsage.rss()`), a few microseconds: the
 * replay keeps it out of its timings.
 */
export class RssSampler {
  #baselineBytes = 0;
  #maxBytes = 0;

  /** Takes the current resident bytes as the baseline (call after `settleMemory`) and starts a new maximum. */
  setBaseline(): void {
    this.#baselineBytes = process.memoryUsage.rss();
    this.#maxBytes = this.#baselineBytes;
  }

  sample(): void {
    const rss = process.memoryUsage.rss();
    if (rss > this.#maxBytes) this.#maxBytes = rss;
  }

  /** The largest sample above the baseline since the baseline or the last call; starts a new maximum. */
  takeMaxAboveBaseline(): number {
    this.sample();
    const above = this.#maxBytes - this.#baselineBytes;
    this.#maxBytes = this.#baselineBytes;
    return above;
  }
}
