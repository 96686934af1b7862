import { BenchUsageError } from './parseBenchFlags.js';

/**
 * The named entries of `all` (all of them when `names` is undefined), in `all`'s order.
 * @throws BenchUsageError naming the unknown names and the known ones
 */
export function selectByName<T extends { readonly name: string }>(all: readonly T[], names: readonly string[] | undefined): T[] {
  if (names === undefined) return [...all];
  const unknown = names.filter((name) => !all.some((a) => a.name === name));
  if (unknown.length > 0) throw new BenchUsageError(`Unknown allocator ${unknown.join(', ')}; known: ${all.map((a) => a.name).join(', ')}.`);
  return all.filter((a) => names.includes(a.name));
}

/**
 * Runs a bench's `main`: a usage error prints its message and exits with 2, any other error its stack and 1.
 */
export function runBench(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof BenchUsageError ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = error instanceof BenchUsageError ? 2 : 1;
  });
}
