import type { Command } from 'commander';
import type { MemorySnapshot } from '@stowage/core';
import { formatBytes, InvalidArgumentError } from '@stowage/core';
import { writeSnapshotPickle } from '@stowage/snapshot-pickle';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import { Progress } from '../Progress.js';
import type { Input } from '../readInput.js';
import { hasRecordedActions, INPUT_FORMATS } from '../readInput.js';
import { parseMoment, snapshotAt } from '../replayInput.js';
import { checkOutputPath, writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadInput, noteOutOfMemory, withReplayOptions } from './replayOptions.js';

/** The flags that only a replay uses: given for a snapshot without `--replay`, they are refused. */
const REPLAY_ONLY_FLAGS = ['at', 'allocator', 'capacity', 'limit', 'streams'] as const;

type SnapshotFlags = ReplayFlags & { at: string; output: string; format?: string; replay?: boolean };

/**
 * `stowage snapshot <input>`: a snapshot as JSON or a pickle. A snapshot (a PyTorch pickle, a Stowage snapshot or a
 * recording) is converted as it is; a trace, or a snapshot with `--replay`, is replayed through `--allocator` to a
 * chosen event and the engine's snapshot there is written.
 */
export function addSnapshotCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('snapshot')
      .description("convert a snapshot to JSON or a pickle PyTorch's viewer opens, as it is; or replay a trace (or with --replay a snapshot's trace) to a chosen event and write the allocator's snapshot there")
      .argument('<input>', INPUT_FORMATS)
      .option('--replay', "replay a snapshot's trace through --allocator rather than converting the snapshot as it is (a trace is always replayed)")
      .option('--at <event>', "the event a replay stops after: an index, 'peak' (of live bytes) or 'end'", 'peak')
      .option('-o, --output <file>', 'where to write it (- for standard output)', '-')
      .option('-f, --format <format>', 'json or pickle (default: pickle for a .pickle or .pkl output, else json)'),
  ).action(async (path: string, flags: SnapshotFlags, command: Command) => {
    const json = isJson(command);
    const format = flags.format ?? (/\.(pickle|pkl)$/i.test(flags.output) ? 'pickle' : 'json');
    if (format !== 'json' && format !== 'pickle') throw new InvalidArgumentError('--format', format, "'json' or 'pickle'");
    const moment = parseMoment(flags.at);
    const config = allocatorConfig(flags.allocator);
    checkOutputPath('-o', flags.output);
    using progress = new Progress(`reading ${path}`, !json);
    const input = await loadInput(path, flags, progress, context.stdin);
    if (input.snapshot !== undefined && !flags.replay) {
      const given = REPLAY_ONLY_FLAGS.filter((flag) => command.getOptionValueSource(flag) === 'cli');
      if (given.length > 0) {
        throw new InvalidArgumentError(`--${given[0]}`, flags[given[0]!], `given with --replay: ${path} is a snapshot, converted as it is unless --replay asks to replay its trace`);
      }
      progress.stop();
      convertAsIs(context, input as Input & { snapshot: MemorySnapshot }, format, flags.output, json);
      return;
    }
    const replayed = snapshotAt(input, config, moment, {
      capacity: flags.capacity,
      limit: flags.limit,
      streams: flags.streams ?? false,
      onProgress: (d, t) => progress.update(d, t, `replaying ${input.name}`),
    });
    progress.stop();
    const { snapshot, index } = replayed;
    noteOutOfMemory(context, input, replayed);
    writeOutput(context, flags.output, format === 'pickle' ? writeSnapshotPickle(snapshot) : `${JSON.stringify(snapshot)}\n`);
    if (flags.output === '-') return;
    const reserved = reservedBytes(snapshot);
    const summary = { output: flags.output, format, trace: input.name, replayed: true, allocator: config.name, event: index, events: input.events.length, outOfMemoryAt: replayed.outOfMemoryAt, segments: snapshot.segments.length, reservedBytes: reserved };
    const stoppedAt = replayed.outOfMemoryAt === null ? `after event ${index}` : `at event ${replayed.outOfMemoryAt} (out of memory)`;
    if (json) context.out(`${JSON.stringify(summary)}\n`);
    else context.out(`Wrote ${flags.output} (${format}): ${config.name} ${stoppedAt} of ${input.events.length} of ${input.name}, ${snapshot.segments.length} segments, ${formatBytes(reserved)} reserved.\n`);
  });
}

/**
 * Writes a snapshot input as it is: a JSON output keeps the document as read (a recording's LMS and IPC entries
 * and extra keys included); a pickle holds what PyTorch's viewer knows, so a recording's LMS and IPC entries are
 * left out, with a note saying how many.
 */
function convertAsIs(context: CliContext, input: Input & { snapshot: MemorySnapshot }, format: 'json' | 'pickle', output: string, json: boolean): void {
  const { snapshot } = input;
  const recordedEntries = input.json !== undefined && hasRecordedActions(input.json) ? countEntries(input.json) - snapshot.device_traces.reduce((n, t) => n + t.length, 0) : 0;
  const content = format === 'pickle' ? writeSnapshotPickle(snapshot) : `${JSON.stringify(input.json ?? snapshot)}\n`;
  writeOutput(context, output, content);
  const leftOut = format === 'pickle' ? recordedEntries : 0;
  if (leftOut > 0) context.err(`Left out ${leftOut} LMS and IPC trace entries of ${input.name}, which PyTorch's viewer does not know; the JSON export (-f json) keeps them.\n`);
  if (output === '-') return;
  const reserved = reservedBytes(snapshot);
  const entries = snapshot.device_traces.reduce((n, t) => n + t.length, 0) + (format === 'json' ? recordedEntries : 0);
  const summary = { output, format, trace: input.name, replayed: false, segments: snapshot.segments.length, reservedBytes: reserved, entries, leftOutEntries: leftOut };
  if (json) context.out(`${JSON.stringify(summary)}\n`);
  else context.out(`Wrote ${output} (${format}): ${input.name} as it is, ${snapshot.segments.length} segments, ${formatBytes(reserved)} reserved, ${entries} trace entries.\n`);
}

function reservedBytes(snapshot: MemorySnapshot): number {
  return snapshot.segments.reduce((s, seg) => s + seg.total_size, 0);
}

/** Trace entries of a parsed snapshot JSON, on every device. */
function countEntries(raw: unknown): number {
  const traces = (raw as { device_traces?: unknown }).device_traces;
  return Array.isArray(traces) ? traces.reduce((n: number, t) => n + (Array.isArray(t) ? t.length : 0), 0) : 0;
}
