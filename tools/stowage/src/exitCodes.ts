import type { StowageErrorCode } from '@stowage/core';
import { isStowageError } from '@stowage/core';
import { MissingDeviceError } from './MissingDeviceError.js';
import { UnwritableOutputError } from './writeOutput.js';

/** The command's exit codes. A child process's (demo, bench) passes through unchanged. */
export const EXIT = {
  ok: 0,
  /** A bug, or a failure the command did not foresee: the message carries the stack. */
  failed: 1,
  /** A command line it does not understand: an unknown command, flag or allocator name, a bad value. */
  usage: 2,
  /** An input file that is missing, or in no format it reads, or damaged, or without the device asked for. */
  input: 3,
  /** The replay or run ran out of device memory. */
  outOfMemory: 4,
} as const;

const INPUT_CODES: readonly StowageErrorCode[] = ['FILE_NOT_FOUND', 'UNKNOWN_FORMAT', 'MALFORMED_PICKLE', 'UNSAFE_PICKLE'];

/** What to tell the user after an error of each code: the next thing to try. */
const HINTS: Partial<Record<StowageErrorCode, string>> = {
  FILE_NOT_FOUND: 'Check the path; ../shared/traces (from the repository root) holds real traces to try.',
  UNKNOWN_FORMAT: '`stowage replay --help` lists the formats the command reads.',
  MALFORMED_PICKLE: 'The pickle is truncated or corrupt: write it again with torch.cuda.memory._dump_snapshot.',
  UNSAFE_PICKLE: 'Only plain-data snapshot pickles are read (what torch.cuda.memory._dump_snapshot writes); this one imports or calls code.',
  INVALID_ARGUMENT: 'Run the command with --help for the values it takes.',
};

/** The exit code for `error` (see {@link EXIT}). */
export function exitCodeOf(error: unknown): number {
  if (!isStowageError(error)) return EXIT.failed;
  if (INPUT_CODES.includes(error.code) || error instanceof MissingDeviceError) return EXIT.input;
  if (error.code === 'INVALID_ARGUMENT') return EXIT.usage;
  if (error.code === 'OUT_OF_MEMORY') return EXIT.outOfMemory;
  return EXIT.failed;
}

/**
 * The lines to print for `error`: for a StowageError its message, its code and a hint (never a stack: these are
 * the user's input, not the command's bugs); for anything else the stack, marked as a bug to report.
 */
export function describeError(error: unknown): string {
  if (isStowageError(error)) {
    const hint = error instanceof UnwritableOutputError ? undefined : HINTS[error.code];
    return `stowage: ${error.message} [${error.code}]${hint === undefined ? '' : `\n${hint}`}`;
  }
  const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
  return `stowage: unexpected failure (a bug in stowage; please report it with this output):\n${text}`;
}
