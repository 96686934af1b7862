// @stowage/lab/bench-kit (Node only): what the benches share: JSON-line output with a progress bar on a terminal,
// flags, per-call timing and garbage collection between rounds.
export type { BenchRecord } from './BenchReporter.js';
export { BenchReporter } from './BenchReporter.js';
export type { BenchFlagOptions, BenchFlags } from './parseBenchFlags.js';
export { allocatorNames, BenchUsageError, parseBenchFlags } from './parseBenchFlags.js';
export { collectGarbage } from './collectGarbage.js';
export { runBench, selectByName } from './runBench.js';
export { median, timePerCall, timeRound } from './timePerCall.js';
