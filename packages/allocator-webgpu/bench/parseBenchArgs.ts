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

export const BENCH_USAGE = `Usage: node --expose-gc dist-bench/webgpu.bench.js [--trace <substring>] [--all] [--allocator <name>[,<name>…]]
  --trace <substring>   replay only traces whose name contains <substring> (searched among all traces)
  --all                 replay every trace under the trace root (default: six PyTorch traces of different shapes)
  --allocator <names>   run only the named allocators: stowage, tfjs, raw (repeat or comma-separate)
  --submit-every <n>    the program submits after every n frees (default 1); freed buffers of Stowage and tfjs
                        wait for the next submit, so a larger n holds more memory pending
JSON lines go to stdout; a progress bar goes to stderr when it is a terminal.`;

/** Thrown for a command line the bench does not understand; the message says what was wrong. */
export class BenchUsageError extends Error {
  override readonly name = 'BenchUsageError';
}

/**
 * Parses the bench's command line (`process.argv.slice(2)`); `--flag value` and `--flag=value` both work.
 * @throws BenchUsageError for an unknown flag or a flag missing its value
 */
export function parseBenchArgs(argv: readonly string[]): BenchArgs {
  let trace: string | undefined;
  let all = false;
  let allocators: string[] | undefined;
  let help = false;
  let submitEveryFrees = 1;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const flag = eq >= 0 ? arg.slice(0, eq) : arg;
    const value = (): string => {
      const v = eq >= 0 ? arg.slice(eq + 1) : argv[++i];
      if (v === undefined || v === '') throw new BenchUsageError(`${flag} needs a value.\n${BENCH_USAGE}`);
      return v;
    };
    switch (flag) {
      case '--trace':
        trace = value();
        break;
      case '--all':
        all = true;
        break;
      case '--allocator':
        allocators = [...(allocators ?? []), ...value().split(',').filter((s) => s !== '')];
        break;
      case '--submit-every': {
        const n = Number(value());
        if (!Number.isSafeInteger(n) || n < 1) throw new BenchUsageError(`--submit-every needs a positive integer.\n${BENCH_USAGE}`);
        submitEveryFrees = n;
        break;
      }
      case '--help':
      case '-h':
        help = true;
        break;
      default:
        throw new BenchUsageError(`Unknown argument ${JSON.stringify(arg)}.\n${BENCH_USAGE}`);
    }
  }
  return { trace, all, allocators, submitEveryFrees, help };
}
