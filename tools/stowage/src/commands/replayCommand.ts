import type { Command } from 'commander';
import { formatBytes } from '@stowage/core';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import { EXIT } from '../exitCodes.js';
import { formatTable } from '../formatTable.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import type { PytorchFigures, ReplayReport } from '../replayInput.js';
import { pytorchFigures, replayInput } from '../replayInput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadInput, withReplayOptions } from './replayOptions.js';

/**
 * `stowage replay <trace>`: replays a trace through an allocator configuration on a virtual device and prints a
 * summary table beside PyTorch's own figures where the trace (or the traces README) has them. Exits with 4 when
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
    const input = await loadInput(path, flags, progress);
    const report = replayInput(input, config, { capacity: flags.capacity, limit: flags.limit, streams: flags.streams ?? false, onProgress: (done, total) => progress.update(done, total, `replaying ${input.name}`) });
    progress.stop();
    const pytorch = pytorchFigures(input) ?? null;
    if (json) context.out(`${JSON.stringify({ ...report, pytorch })}\n`);
    else context.out(`${formatReplay(report, pytorch)}\n`);
    if (report.oomAtOp !== null) context.exitCode = EXIT.outOfMemory;
  });
}

/** The summary table of a replay, with PyTorch's column when there are figures for it. */
export function formatReplay(report: ReplayReport, pytorch: PytorchFigures | null): string {
  const header = ['', `stowage (${report.allocator})`, ...(pytorch ? [`pytorch (${pytorch.source})`] : [])];
  const row = (label: string, ours: string, theirs?: string): string[] => [label, ours, ...(pytorch ? [theirs ?? ''] : [])];
  const rows = [
    row('events', String(report.events)),
    row('allocations / frees', `${report.allocs} / ${report.frees}`),
    row('peak live (requested)', formatBytes(report.peakLiveBytes)),
    row('peak reserved', formatBytes(report.peakReservedBytes), pytorch ? pytorchPeak(pytorch) : undefined),
    row('segments created', String(report.segments), pytorch ? String(pytorch.segments) : undefined),
    row('reserved / live', report.ratio.toFixed(4), pytorch ? pytorch.ratio.toFixed(4) : undefined),
    row('out of memory', report.oomAtOp === null ? 'no' : `at operation ${report.oomAtOp}`),
    row('allocator calls / s', Math.round(report.opsPerSec).toLocaleString('en-US')),
  ];
  const device = report.capacityBytes === null ? 'an unbounded virtual device' : `a virtual device of ${formatBytes(report.capacityBytes)}`;
  const note = pytorch ? '' : '\n(no PyTorch figures: the trace has no segment events from a cold start, and the traces README no row for it)';
  return `${report.trace} (${report.format}) on ${device}\n\n${formatTable(header, rows)}${note}`;
}

/** The README's figure as it prints it (GiB to three decimals), the trace's to the byte. */
function pytorchPeak(pytorch: PytorchFigures): string {
  return pytorch.source === 'traces README' ? `${(pytorch.peakReservedBytes / 2 ** 30).toFixed(3)} GiB` : formatBytes(pytorch.peakReservedBytes);
}
