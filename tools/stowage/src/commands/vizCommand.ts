import type { Command } from 'commander';
import type { MemorySnapshot } from '@stowage/core';
import { allocatorConfig } from '../allocatorConfigs.js';
import type { CliContext } from '../CliContext.js';
import { Progress } from '../Progress.js';
import { snapshotAt } from '../replayInput.js';
import { buildVizPage } from '../viz/buildVizPage.js';
import { checkOutputPath, writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadInput, noteOutOfMemory, withReplayOptions } from './replayOptions.js';

/**
 * `stowage viz <snapshot> -o memory.html`: the visualizer page of a snapshot (a PyTorch pickle or a Stowage JSON
 * snapshot); given a trace, replays it through `--allocator` to its end first.
 */
export function addVizCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('viz')
      .description('write the memory visualizer page (one self-contained HTML file) of a snapshot, or of a trace replayed to its end')
      .argument('<snapshot>', 'a PyTorch snapshot pickle or a Stowage snapshot (.json); or a trace, replayed through --allocator')
      .option('-o, --output <file>', 'the HTML file to write', 'memory.html'),
  ).action(async (path: string, flags: ReplayFlags & { output: string }, command: Command) => {
    const json = isJson(command);
    const config = allocatorConfig(flags.allocator);
    checkOutputPath('-o', flags.output);
    using progress = new Progress(`reading ${path}`, !json);
    const input = await loadInput(path, flags, progress, context.stdin); // exits 3 for a --device the input lacks
    // A replay's snapshot is of device 0, and its entries carry the replay's clock, not the program's: no time axis.
    const replayed = input.snapshot === undefined;
    const device = replayed ? 0 : input.device;
    let snapshot: MemorySnapshot;
    let source = input.path;
    if (input.snapshot !== undefined) snapshot = input.snapshot;
    else {
      const replay = snapshotAt(input, config, 'end', { capacity: flags.capacity, limit: flags.limit, streams: flags.streams ?? false, onProgress: (d, t) => progress.update(d, t, `replaying ${input.name}`) });
      noteOutOfMemory(context, input, replay);
      snapshot = replay.snapshot;
      source = `${input.path} replayed through ${config.name}`;
    }
    progress.stop();
    const page = buildVizPage(snapshot, { title: `Memory: ${input.name}`, source, device, timed: !replayed, ...(input.recorded ? { trace: input.recorded } : {}) });
    writeOutput(context, flags.output, page);
    if (flags.output === '-') return;
    const summary = { output: flags.output, bytes: Buffer.byteLength(page), segments: snapshot.segments.filter((s) => s.device === device).length, entries: input.recorded?.length ?? snapshot.device_traces[device]?.length ?? 0 };
    if (json) context.out(`${JSON.stringify(summary)}\n`);
    else context.out(`Wrote ${flags.output}: ${summary.segments} segments, ${summary.entries} trace entries. Open it in a browser (it loads nothing from the network).\n`);
  });
}
