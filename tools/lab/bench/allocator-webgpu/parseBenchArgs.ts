import { allocatorNames, BenchUsageError, parseBenchFlags } from '@stowage/lab/bench-kit';

export { BenchUsageError };

/** What the WebGPU replay bench was asked to run. */
export interface BenchArgs {
  /** Run only traces whose name contains this (among all traces). */
  readonly trace: string | undefined;
  /** Run every trace found, not only the default set. */
  readonly all: boolean;
  /** Run only these allocators (by name). */
  readonly allocators: readonly string[] | undefined;
  /** The program submits after this many frees (default 1: after each operation, as a program that submits its work at once). */
  readonly submitEveryFrees: number;
  readonly help: boolean;
}

export const BENCH_USAGE = `Usage: node --expose-gc tools/lab/dist-bench/allocator-webgpu/webgpu.bench.js [--trace <substring>] [--all] [--allocator <name>[,<name>…]]
  --trace <substring>   replay only traces whose name contains <substring> (searched among all traces)
  --all                 replay every trace under the trace root (default: six PyTorch traces of different shapes)
  --allocator <names>   run only the named allocators: stowage, tfjs, raw (repeat or comma-separate)
  --submit-every <n>    the program submits after every n frees (default 1); freed buffers of Stowage and tfjs
                        wait for the next submit, so a larger n holds more memory pending
JSON lines go to stdout; a progress bar goes to stderr when it is a terminal.`;

/**
 * Parses the bench's command line (`process.argv.slice(2)`); `--flag value` and `--flag=value` both work.
 * @throws BenchUsageError for an unknown flag, a flag missing its value or a bad --submit-every
 */
export function parseBenchArgs(argv: readonly string[]): BenchArgs {
  const v = parseBenchFlags(
    argv,
    { trace: { type: 'string' }, all: { type: 'boolean' }, allocator: { type: 'string', multiple: true }, 'submit-every': { type: 'string' } },
    BENCH_USAGE,
  );
  const submitEveryFrees = Number(v['submit-every'] ?? 1);
  if (!Number.isSafeInteger(submitEveryFrees) || submitEveryFrees < 1) throw new BenchUsageError(`--submit-every needs a positive integer.\n${BENCH_USAGE}`);
  return { trace: v.trace, all: v.all ?? false, allocators: allocatorNames(v.allocator), submitEveryFrees, help: v.help ?? false };
}
