import { collectGarbage } from './collectGarbage.js';

// Per-call timing for the benches (cow, lms): warm up, then the median of ROUNDS rounds, each repeating the call
// until MIN_MS / ROUNDS milliseconds have passed, reading the clock once per batch.

/** Each measurement repeats until it has taken this long (and at least 3 calls per round), in ROUNDS rounds. */
const MIN_MS = 270;
const ROUNDS = 9;

/** Nanoseconds per call of `run`: the median of {@link ROUNDS} rounds (a collection landing in one moves it little). */
export function timePerCall(run: () => void): number {
  collectGarbage();
  for (let i = 0; i < 3; i++) run(); // warm up
  const rounds: number[] = [];
  for (let r = 0; r < ROUNDS; r++) rounds.push(timeRound(run, MIN_MS / ROUNDS));
  return median(rounds);
}

/** Nanoseconds per call of `run`, over at least `ms` milliseconds and 3 calls. */
export function timeRound(run: () => void, ms: number): number {
  let n = 0;
  let batch = 1; // calls between reads of the clock, doubling while a batch is short: the clock costs ~100 ns
  const start = performance.now();
  do {
    for (let i = 0; i < batch; i++) run();
    n += batch;
    if (performance.now() - start < ms / 100) batch *= 2;
  } while (performance.now() - start < ms || n < 3);
  return ((performance.now() - start) * 1e6) / n;
}

/** The middle value (the mean of the two middle ones for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
