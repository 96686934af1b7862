import type { Command } from 'commander';
import { formatBytes, InvalidArgumentError } from '@stowage/core';
import { writeSnapshotPickle } from '@stowage/snapshot-pickle';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS, readInput } from '../readInput.js';
import { parseMoment, snapshotAt } from '../replayInput.js';
import { writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import { deviceIndex, withReplayOptions } from './replayOptions.js';

/** `stowage snapshot <trace>`: the allocator's snapshot after a chosen event of a replay, as JSON or a pickle. */
export function addSnapshotCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('snapshot')
      .description("replay a trace to a chosen event and write the allocator's snapshot (JSON, or a pickle PyTorch's viewer opens)")
      .argument('<trace>', INPUT_FORMATS)
      .option('--at <event>', "the event to stop after: an index, 'peak' (of live bytes) or 'end'", 'peak')
      .option('-o, --output <file>', 'where to write it (- for standard output)', '-')
      .option('-f, --format <format>', 'json or pickle (default: pickle for a .pickle or .pkl output, else json)'),
  ).action(async (path: string, flags: ReplayFlags & { at: string; output: string; format?: string }, command: Command) => {
    const json = (command.optsWithGlobals() as { json?: boolean }).json === true;
    const config = allocatorConfig(flags.allocator);
    const moment = parseMoment(flags.at);
    const format = flags.format ?? (/\.(pickle|pkl)$/i.test(flags.output) ? 'pickle' : 'json');
    if (format !== 'json' && format !== 'pickle') throw new InvalidArgumentError('--format', format, "'json' or 'pickle'");
    const input = await readInput(path, deviceIndex(flags.device));
    using progress = new Progress(`replaying ${input.name}`, !json);
    const { snapshot, index } = snapshotAt(input, config, moment, { capacity: flags.capacity, limit: flags.limit, streams: flags.streams ?? false, onProgress: (d, t) => progress.update(d, t) });
    progress.stop();
    writeOutput(context, flags.output, format === 'pickle' ? writeSnapshotPickle(snapshot) : `${JSON.stringify(snapshot)}\n`);
    if (flags.output === '-') return;
    const reserved = snapshot.segments.reduce((s, seg) => s + seg.total_size, 0);
    const summary = { output: flags.output, format, trace: input.name, allocator: config.name, event: index, events: input.events.length, segments: snapshot.segments.length, reservedBytes: reserved };
    if (json) context.out(`${JSON.stringify(summary)}\n`);
    else context.out(`Wrote ${flags.output} (${format}): ${config.name} after event ${index} of ${input.events.length} of ${input.name}, ${snapshot.segments.length} segments, ${formatBytes(reserved)} reserved.\n`);
  });
}
