export type { BenchRecord } from './BenchReporter.js';
export { BenchReporter } from './BenchReporter.js';
export type { BenchFlagOptions, BenchFlags } from './parseBenchFlags.js';
export { allocatorNames, BenchUsageError, parseBenchFlags } from './parseBenchFlags.js';
export { collectGarbage } from './collectGarbage.js';
export { runBench, selectByName } from './runBench.js';
export { median, timePerCall, timeRound } from './timePerCall.js';
