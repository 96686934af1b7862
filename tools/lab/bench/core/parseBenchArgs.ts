import { allocatorNames, parseBenchFlags } from '@stowage/lab/bench-kit';

export { BenchUsageError } from '@stowage/lab/bench-kit';

/** What the engine benchmark was asked to run. */
export interface BenchArgs {
  /** Run only traces whose name contains this. */
  readonly trace: string | undefined;
  /** Run only these allocators (by name). */
  readonly allocators: readonly string[] | undefined;
  /** Skip the scaling, pairs and static-shape scenarios. */
  readonly quick: boolean;
  readonly help: boolean;
}

export const BENCH_USAGE = `Usage: node tools/lab/dist-bench/core/engine.bench.js [--trace <substring>] [--allocator <name>[,<name>…]] [--quick]
  --trace <substring>   replay only traces whose name contains <substring>
  --allocator <names>   run only the named allocators (repeat or comma-separate)
  --quick               replay traces only: skip the scaling, pairs and static-shape scenarios
JSON lines go to stdout; a progress bar goes to stderr when it is a terminal.`;

/**
 * Parses the bench's command line (`process.argv.slice(2)`); `--flag value` and `--flag=value` both work.
 * @throws BenchUsageError for an unknown flag or a flag missing its value
 */
export function parseBenchArgs(argv: readonly string[]): BenchArgs {
  const v = parseBenchFlags(argv, { trace: { type: 'string' }, allocator: { type: 'string', multiple: true }, quick: { type: 'boolean' } }, BENCH_USAGE);
  return { trace: v.trace, allocators: allocatorNames(v.allocator), quick: v.quick ?? false, help: v.help ?? false };
}
