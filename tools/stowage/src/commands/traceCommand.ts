import type { Command } from 'commander';
import { formatTraceLines, toTraceEvents } from '@stowage/snapshot-pickle';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import { snapshotAt } from '../replayInput.js';
import type { AllocatorEventRecord } from '../toChromeTrace.js';
import { toChromeTrace } from '../toChromeTrace.js';
import { checkOutputPath, writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadInput, withReplayOptions } from './replayOptions.js';

/**
 * `stowage trace <input>`: a trace's allocator events as Stowage's JSON lines, or with `--chrome` in the Trace
 * Event Format (Perfetto, chrome://tracing). With `--replay`, the events of the chosen allocator replaying it
 * (its own segment decisions) rather than the trace's.
 */
export function addTraceCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('trace')
      .description("write a trace's allocator events as JSON lines, or with --chrome as Trace Event Format JSON for Perfetto and chrome://tracing")
      .argument('<input>', INPUT_FORMATS)
      .option('--chrome', 'write the Trace Event Format (JSON) instead of JSON lines')
      .option('--replay', "write the events of --allocator replaying the trace (its own segments) instead of the trace's")
      .option('-o, --output <file>', 'where to write (- for standard output)', '-'),
  ).action(async (path: string, flags: ReplayFlags & { chrome?: boolean; replay?: boolean; output: string }, command: Command) => {
    const json = isJson(command);
    checkOutputPath('-o', flags.output);
    using progress = new Progress(`reading ${path}`, !json);
    const input = await loadInput(path, flags, progress);
    let records: AllocatorEventRecord[] = input.recorded ?? input.events;
    let events = input.events;
    let source = input.name;
    if (flags.replay) {
      const config = allocatorConfig(flags.allocator);
      const { snapshot } = snapshotAt(input, config, 'end', { capacity: flags.capacity, limit: flags.limit, streams: flags.streams ?? false, onProgress: (d, t) => progress.update(d, t, `replaying ${input.name}`) });
      const entries = snapshot.device_traces[0] ?? [];
      records = entries.map((e) => ({ action: e.action, addr: e.addr, size: e.size, stream: e.stream, timeUs: null }));
      events = toTraceEvents(snapshot);
      source = `${input.name} replayed through ${config.name}`;
    }
    const content = flags.chrome ? `${JSON.stringify(toChromeTrace(records, source))}\n` : formatTraceLines(events, flags.replay ? 0 : input.device);
    progress.stop();
    writeOutput(context, flags.output, content);
    if (flags.output === '-') return;
    const summary = { output: flags.output, format: flags.chrome ? 'chrome' : 'jsonl', events: records.length, source };
    if (json) context.out(`${JSON.stringify(summary)}\n`);
    else context.out(`Wrote ${flags.output}: ${records.length} events of ${source}${flags.chrome ? ' (open it in ui.perfetto.dev or chrome://tracing)' : ''}.\n`);
  });
}
