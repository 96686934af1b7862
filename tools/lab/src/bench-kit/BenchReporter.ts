import cliProgress from 'cli-progress';

/** A JSON record the bench prints, one per line. */
export type BenchRecord = Readonly<Record<string, unknown>>;

/**
 * Where the bench's results go: one JSON line per record on stdout, and a progress bar on stderr only when stderr
 * is a terminal (so piping stdout to a file, or running in CI, gives clean JSON lines and no bar).
 */
export class BenchReporter {
  readonly #bar: cliProgress.SingleBar | undefined;

  /**
   * @param label names the bench on its progress bar
   * @param totalSteps the number of steps (`step(count)` counts) the run will make
   */
  constructor(label: string, totalSteps: number) {
    if (!process.stderr.isTTY) return;
    this.#bar = new cliProgress.SingleBar(
      { stream: process.stderr, format: `${label} [{bar}] {value}/{total} {task}`, clearOnComplete: true, hideCursor: true },
      cliProgress.Presets.shades_classic,
    );
    this.#bar.start(totalSteps, 0, { task: '' });
  }

  /** Prints `record` as one JSON line on stdout. */
  emit(record: BenchRecord): void {
    if (this.#bar) process.stderr.write('\r\x1b[2K'); // clear the bar's line in case stdout shares the terminal
    process.stdout.write(`${JSON.stringify(record)}\n`);
  }

  /** Names the work starting now. */
  task(task: string): void {
    this.#bar?.update({ task });
  }

  /** Marks `count` units of work done. */
  step(count = 1): void {
    this.#bar?.increment(count);
  }

  /** Removes the progress bar. */
  stop(): void {
    this.#bar?.stop();
  }
}
