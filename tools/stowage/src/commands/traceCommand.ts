import type { Command } from 'commander';
import { InvalidArgumentError } from '@stowage/core';
import type { SnapshotTraceEntry } from '@stowage/core/plugin-kit';
import { formatTraceLines, toTraceEvents } from '@stowage/snapshot-pickle';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import type { ListedEntry } from '../formatTraceListing.js';
import { formatTraceListing } from '../formatTraceListing.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import { snapshotAt } from '../replayInput.js';
import type { AllocatorEventRecord } from '../toChromeTrace.js';
import { toChromeTrace } from '../toChromeTrace.js';
import { checkOutputPath, writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadInput, noteOutOfMemory, withReplayOptions } from './replayOptions.js';

/**
 * `stowage trace <input>`: a trace's allocator events as Stowage's JSON lines, or with `--chrome` in the Trace
 * Event Format (Perfetto, chrome://tracing). With `--replay`, the events of the chosen allocator replaying it
 * (its own segment decisions) rather than the trace's.
 */
export function addTraceCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('trace')
      .description("write a trace's allocator events as JSON lines, with --chrome as Trace Event Format JSON for Perfetto and chrome://tracing, or with --list as a readable listing")
      .argument('<input>', INPUT_FORMATS)
      .option('--chrome', 'write the Trace Event Format (JSON) instead of JSON lines')
      .option('--list', "write a readable listing, one line per entry (as PyTorch's _memory_viz trace): named allocations, the segment each is in, frees, cudaMalloc and cudaFree")
      .option('--replay', "write the events of --allocator replaying the trace (its own segments) instead of the trace's")
      .option('-o, --output <file>', 'where to write (- for standard output)', '-'),
  ).action(async (path: string, flags: ReplayFlags & { chrome?: boolean; list?: boolean; replay?: boolean; output: string }, command: Command) => {
    const json = isJson(command);
    if (flags.chrome && flags.list) throw new InvalidArgumentError('--list', true, 'left out with --chrome: give one of them');
    checkOutputPath('-o', flags.output);
    using progress = new Progress(`reading ${path}`, !json);
    const input = await loadInput(path, flags, progress, context.stdin);
    let records: AllocatorEventRecord[] = input.recorded ?? input.events;
    let events = input.events;
    let source = input.name;
    let segments = input.snapshot?.segments.filter((seg) => seg.device === input.device) ?? [];
    let listed: ListedEntry[] = input.recorded ?? (input.snapshot === undefined ? input.events : (input.snapshot.device_traces[input.device] ?? []).map(listedOf));
    if (flags.replay) {
      const config = allocatorConfig(flags.allocator);
      const replayed = snapshotAt(input, config, 'end', { capacity: flags.capacity, limit: flags.limit, streams: flags.streams ?? false, onProgress: (d, t) => progress.update(d, t, `replaying ${input.name}`) });
      noteOutOfMemory(context, input, replayed);
      const { snapshot } = replayed;
      const entries = snapshot.device_traces[0] ?? [];
      records = entries.map((e) => ({ action: e.action, addr: e.addr, size: e.size, stream: e.stream, timeUs: null }));
      events = toTraceEvents(snapshot);
      listed = entries.map(listedOf);
      segments = snapshot.segments;
      source = `${input.name} replayed through ${config.name}`;
    }
    const content = flags.chrome
      ? `${JSON.stringify(toChromeTrace(records, source))}\n`
      : flags.list
        ? formatTraceListing(listed, `${source}, device ${flags.replay ? 0 : input.device}`, { segments })
        : formatTraceLines(events, flags.replay ? 0 : input.device);
    progress.stop();
    writeOutput(context, flags.output, content);
    if (flags.output === '-') return;
    const summary = { output: flags.output, format: flags.chrome ? 'chrome' : flags.list ? 'list' : 'jsonl', events: records.length, source };
    if (json) context.out(`${JSON.stringify(summary)}\n`);
    else context.out(`Wrote ${flags.output}: ${records.length} events of ${source}${flags.chrome ? ' (open it in ui.perfetto.dev or chrome://tracing)' : ''}.\n`);
  });
}

function listedOf(e: SnapshotTraceEntry): ListedEntry {
  return { action: e.action, addr: e.addr, size: e.size, stream: e.stream, deviceFree: e.device_free };
}
