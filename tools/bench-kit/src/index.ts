export type { BenchRecord } from './BenchReporter.js';
export { BenchReporter } from './BenchReporter.js';
