import { parseArgs, type ParseArgsConfig } from 'node:util';

/** Thrown for a command line a bench does not understand; the message says what was wrong and how to call it. */
export class BenchUsageError extends Error {
  override readonly name = 'BenchUsageError';
}

export type BenchFlagOptions = NonNullable<ParseArgsConfig['options']>;
const HELP = { type: 'boolean', short: 'h' } as const;
/** The values `parseArgs` gives for `options` plus `--help`. */
export type BenchFlags<O extends BenchFlagOptions> = ReturnType<
  typeof parseArgs<{ options: O & { help: typeof HELP }; strict: true; allowPositionals: false }>
>['values'];

/**
 * Node's `util.parseArgs` (strict, no positionals) with `--help`/`-h` added, its errors turned into
 * BenchUsageError carrying `usage`.
 */
export function parseBenchFlags<O extends BenchFlagOptions>(argv: readonly string[], options: O, usage: string): BenchFlags<O> {
  try {
    return parseArgs({ args: [...argv], options: { ...options, help: HELP }, strict: true, allowPositionals: false }).values as BenchFlags<O>;
  } catch (error) {
    throw new BenchUsageError(`${(error as Error).message}\n${usage}`);
  }
}

/** The allocator names of repeated or comma-separated `--allocator` flags; undefined when none was given. */
export function allocatorNames(values: readonly string[] | undefined): string[] | undefined {
  if (values === undefined) return undefined;
  const names = values.flatMap((v) => v.split(',')).filter((s) => s !== '');
  if (names.length === 0) throw new BenchUsageError('--allocator names no allocator; give one or more names, comma-separated, or leave the flag out for all.');
  return names;
}
