/**
 * Recorded in `ReplayResult.failedAt` when a replay's `stopWhen` predicate asked it to stop (for example
 * because the allocator reserved more than a budget). Never thrown by `replayTrace`.
 */
export class ReplayStoppedError extends Error {
  /** Always `'REPLAY_STOPPED'`. */
  readonly code = 'REPLAY_STOPPED' as const;

  /** @param op index of the first operation that was not performed */
  constructor(readonly op: number) {
    super(`The replay stopped before operation ${op}: stopWhen() returned true.`);
    this.name = 'ReplayStoppedError';
  }
}
