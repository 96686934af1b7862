import cliProgress from 'cli-progress';

/** How long work runs before its bar appears: quicker work shows none. */
const SHOW_AFTER_MS = 1000;

/**
 * A progress bar on stderr for work that takes more than a second: it appears only once a second has passed
 * since the bar was made (so reading, decoding and replaying an input count together), only when stderr is a
 * terminal and output is not `--json`, and is cleared when the work ends, so pipes, scripts and CI see clean
 * output. One bar serves the work's phases one after the other: each `update` names its phase.
 */
export class Progress implements Disposable {
  readonly #label: string;
  readonly #enabled: boolean;
  readonly #startMs = performance.now();
  #bar: cliProgress.SingleBar | undefined;

  /**
   * @param label what is being done, shown before the bar until an `update` names a phase
   * @param enabled false to never show a bar (`--json`)
   */
  constructor(label: string, enabled = true) {
    this.#label = label;
    this.#enabled = enabled && process.stderr.isTTY === true;
  }

  /**
   * Reports `done` of `total` units of the phase `label` (`reading x.pickle`, `replaying x`); shows the bar once
   * the work has run for a second. A `total` of 0 (not known yet) shows nothing.
   */
  update(done: number, total: number, label = this.#label): void {
    if (!this.#enabled || total <= 0) return;
    if (this.#bar === undefined) {
      if (performance.now() - this.#startMs < SHOW_AFTER_MS || done >= total) return;
      this.#bar = new cliProgress.SingleBar(
        { stream: process.stderr, format: '{label} [{bar}] {percentage}% {value}/{total}', clearOnComplete: true, hideCursor: true },
        cliProgress.Presets.shades_classic,
      );
      this.#bar.start(total, done, { label });
      return;
    }
    this.#bar.setTotal(total);
    this.#bar.update(done, { label });
  }

  /** Removes the bar, if one is shown. Idempotent. */
  stop(): void {
    this.#bar?.stop();
    this.#bar = undefined;
  }

  [Symbol.dispose](): void {
    this.stop();
  }
}
