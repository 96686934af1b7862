import type { Command } from 'commander';
import { formatBytes } from '@stowage/core';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import { EXIT } from '../exitCodes.js';
import { formatTable } from '../formatTable.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import type { PytorchFigures, RecordingFigures, ReplayReport } from '../replayInput.js';
import { pytorchFigures, recordingFigures, replayInput } from '../replayInput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadInput, withReplayOptions } from './replayOptions.js';

/**
 * `stowage replay <trace>`: replays a trace through an allocator configuration on a virtual device and prints a
 * summary table beside PyTorch's own figures where the trace (or the traces README) has them, or beside a
 * recording's own for a snapshot Stowage recorded. Exits with 4 when
 * the replay ran out of memory.
 */
export function addReplayCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('replay')
      .description('replay a trace through an allocator configuration; a summary beside PyTorch\'s figures')
      .argument('<trace>', INPUT_FORMATS),
  ).action(async (path: string, flags: ReplayFlags, command: Command) => {
    const json = isJson(command);
    const config = allocatorConfig(flags.allocator);
    using progress = new Progress(`reading ${path}`, !json);
    const input = await loadInput(path, flags, progress, context.stdin);
    const report = replayInput(input, config, { capacity: flags.capacity, limit: flags.limit, streams: flags.streams ?? false, onProgress: (done, total) => progress.update(done, total, `replaying ${input.name}`) });
    progress.stop();
    const pytorch = pytorchFigures(input) ?? null;
    const recording = recordingFigures(input) ?? null;
    if (json) context.out(`${JSON.stringify({ ...report, pytorch, recording })}\n`);
    else context.out(`${formatReplay(report, pytorch ?? recording)}\n`);
    if (report.oomAtOp !== null) {
      const device = report.capacityBytes === null ? 'the virtual device' : `a virtual device of ${formatBytes(report.capacityBytes)}`;
      context.err(`stowage: the replay ran out of memory at operation ${report.oomAtOp} of ${report.events} on ${device}; give a larger --capacity (or --limit) to replay it to its end.\n`);
      context.exitCode = EXIT.outOfMemory;
    }
  });
}

/**
 * The summary table of a replay, with a second column for the figures it is set beside: PyTorch's, or for a
 * snapshot Stowage recorded, the recording's own (its segments and, apart, its page maps).
 */
export function formatReplay(report: ReplayReport, reference: PytorchFigures | RecordingFigures | null): string {
  const recording = reference !== null && 'recordedBy' in reference ? reference : null;
  const header = ['', `stowage (${report.allocator})`, ...(reference === null ? [] : [recording ? `recording (${recording.recordedBy})` : `pytorch (${(reference as PytorchFigures).source})`])];
  const row = (label: string, ours: string, theirs?: string): string[] => [label, ours, ...(reference ? [theirs ?? ''] : [])];
  const rows = [
    row('events', String(report.events)),
    row('allocations / frees', `${report.allocs} / ${report.frees}`),
    row('peak live (requested)', formatBytes(report.peakLiveBytes)),
    row('peak reserved', formatBytes(report.peakReservedBytes), reference ? referencePeak(reference) : undefined),
    row('segments created', String(report.segments), reference ? String(reference.segments) : undefined),
    ...(recording && recording.pageMaps > 0 ? [row('pages mapped (expandable)', '', String(recording.pageMaps))] : []),
    row('reserved / live', report.ratio.toFixed(4), reference ? reference.ratio.toFixed(4) : undefined),
    row('out of memory', report.oomAtOp === null ? 'no' : `at operation ${report.oomAtOp}`),
    row('allocator calls / s', Math.round(report.opsPerSec).toLocaleString('en-US')),
  ];
  const device = report.capacityBytes === null ? 'an unbounded virtual device' : `a virtual device of ${formatBytes(report.capacityBytes)}`;
  const note = !reference
    ? '\n(no PyTorch figures: the trace has no segment events from a cold start, and the traces README no row for it)'
    : recording && recording.pageMaps > 0
      ? "\n(the recording's segments are its segment_alloc entries: an expandable segment's reservation is not in its trace, only the pages mapped into it)"
      : '';
  return `${report.trace} (${report.format}) on ${device}\n\n${formatTable(header, rows)}${note}`;
}

/** The README's figure as it prints it (GiB to three decimals), a trace's or recording's to the byte. */
function referencePeak(reference: PytorchFigures | RecordingFigures): string {
  return 'source' in reference && reference.source === 'traces README' ? `${(reference.peakReservedBytes / 2 ** 30).toFixed(3)} GiB` : formatBytes(reference.peakReservedBytes);
}
