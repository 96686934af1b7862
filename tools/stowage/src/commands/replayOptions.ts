import { basename } from 'node:path';
import type { Command } from 'commander';
import type { MemorySnapshot } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { ALLOCATOR_CONFIGS, allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext, CliStdin } from '../CliContext.js';
import { EXIT } from '../exitCodes.js';
import type { Progress } from '../Progress.js';
import type { Input } from '../readInput.js';
import { readInput } from '../readInput.js';
import type { ReplaySnapshot } from '../replayInput.js';
import { snapshotAt } from '../replayInput.js';

/** The flags of the commands that replay a trace. */
export interface ReplayFlags {
  readonly allocator: string;
  readonly capacity?: string;
  readonly limit?: string;
  readonly device?: string;
  readonly streams?: boolean;
  readonly json?: boolean;
}

/** Adds the replay flags (`--allocator`, `--capacity`, `--limit`, `--device`, `--streams`) to `command`. */
export function withReplayOptions(command: Command): Command {
  return command
    .option('-a, --allocator <name>', `allocator configuration: ${ALLOCATOR_CONFIGS.map((c) => c.name).join(', ')}`, 'pytorch')
    .option('--capacity <bytes>', "device capacity, e.g. 80GiB (default: unbounded, or PyTorch's when the trace ran out of memory)")
    .option('--limit <bytes>', "the allocator's memory limit, e.g. 40GiB")
    .option('--device <index>', "which device's trace (default: a snapshot's first device, all of a trace)")
    .option('--streams', "allocate on the trace's streams rather than all on one");
}

/** `--device` as an index; undefined when not given. @throws InvalidArgumentError for anything but a non-negative integer */
export function deviceIndex(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('--device', value, 'a device index (0, 1, …)');
  return Number(value);
}

/**
 * Reads the input of a command (`-` for standard input) for `--device`, its reading, decompressing and parsing
 * shown on `progress`; `-` reads `stdin` (process.stdin by default).
 * @throws as `readInput`
 */
export async function loadInput(path: string, flags: { readonly device?: string | undefined }, progress: Progress, stdin?: CliStdin): Promise<Input> {
  const label = path === '-' ? 'standard input' : basename(path);
  return readInput(path, { device: deviceIndex(flags.device), onProgress: (phase, done, total) => progress.update(done, total, `${phase} ${label}`), ...(stdin ? { stdin } : {}) });
}

/** True when `--json` was given (on the program, before the command). */
export function isJson(command: Command): boolean {
  return (command.optsWithGlobals() as { json?: boolean }).json === true;
}

/** A snapshot to look at, and what it is of. */
export interface LoadedSnapshot {
  readonly input: Input;
  readonly snapshot: MemorySnapshot;
  /** The device of `snapshot` to look at: `--device` when given, else undefined (all). A replay's is 0. */
  readonly device: number | undefined;
  /** What the snapshot is, for headings: the input's name, and the allocator when it was replayed. */
  readonly source: string;
}

/**
 * The snapshot of the input at `path`: a snapshot as it is; a trace replayed through `--allocator` to its end.
 * @throws as `readInput`, and InvalidArgumentError for bad replay flags
 */
export async function loadSnapshot(path: string, flags: ReplayFlags, progress: Progress, context: CliContext): Promise<LoadedSnapshot> {
  return snapshotOf(await loadInput(path, flags, progress, context.stdin), flags, progress, context);
}

/**
 * Snapshots of several inputs (`compare`'s two): every input is read first, so that one that cannot be read fails
 * the command before any replay runs (and says so alone), then each is replayed as `loadSnapshot` does.
 */
export async function loadSnapshots(paths: readonly string[], flags: ReplayFlags, progress: Progress, context: CliContext): Promise<LoadedSnapshot[]> {
  const inputs: Input[] = [];
  for (const path of paths) inputs.push(await loadInput(path, flags, progress, context.stdin));
  return inputs.map((input) => snapshotOf(input, flags, progress, context));
}

function snapshotOf(input: Input, flags: ReplayFlags, progress: Progress, context: CliContext): LoadedSnapshot {
  if (input.snapshot !== undefined) return { input, snapshot: input.snapshot, device: deviceIndex(flags.device), source: input.name };
  const config = allocatorConfig(flags.allocator);
  const replayed = snapshotAt(input, config, 'end', {
    capacity: flags.capacity,
    limit: flags.limit,
    streams: flags.streams ?? false,
    onProgress: (done, total) => progress.update(done, total, `replaying ${input.name}`),
  });
  noteOutOfMemory(context, input, replayed);
  return { input, snapshot: replayed.snapshot, device: 0, source: `${input.name} replayed through ${config.name}` };
}

/**
 * When `replayed` ran out of memory, says so on stderr (the output then shows the allocator's state at the failed
 * allocation) and sets the exit code to 4, as `stowage replay` does. A command that replays twice (`compare`) says
 * it in one message: a second replay out of memory adds a line to the first's.
 */
export function noteOutOfMemory(context: CliContext, input: Input, replayed: ReplaySnapshot): void {
  if (replayed.outOfMemoryAt === null) return;
  if (context.exitCode === EXIT.outOfMemory) {
    context.err(`  The replay of ${input.name} ran out of memory too, at event ${replayed.outOfMemoryAt} of ${input.events.length}.\n`);
    return;
  }
  context.err(`stowage: the replay of ${input.name} ran out of memory at event ${replayed.outOfMemoryAt} of ${input.events.length}; the output shows the allocator's state when it failed. Give a larger --capacity (or --limit) to replay it to its end.\n`);
  context.exitCode = EXIT.outOfMemory;
}
