import type { Command } from 'commander';
import type { CliContext } from '../CliContext.js';
import { compareSnapshots, comparisonStacks, formatComparison } from '../compareSnapshots.js';
import { toFlameGraphSvg } from '../flameGraph.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import { checkOutputPath, writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import type { LoadedSnapshot } from './replayOptions.js';
import { isJson, loadSnapshots, withReplayOptions } from './replayOptions.js';

/**
 * `stowage compare <before> <after>`: the segments one snapshot has and the other lacks (a segment is its device,
 * address and size), as PyTorch's `_memory_viz compare`: a table and lists on standard output, and with `-o` a
 * flame graph (SVG) of those segments' blocks. A trace is replayed through `--allocator` to its end first.
 */
export function addCompareCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('compare')
      .description("diff two snapshots' segments: which each has alone, and the figures of both (as PyTorch's _memory_viz compare); -o also draws those segments as a flame graph (SVG)")
      .argument('<before>', INPUT_FORMATS)
      .argument('<after>', 'the same kinds of input')
      .option('-o, --output <file>', 'also write a flame graph (SVG) of the segments only one side has'),
  ).action(async (beforePath: string, afterPath: string, flags: ReplayFlags & { output?: string }, command: Command) => {
    const json = isJson(command);
    checkOutputPath('-o', flags.output);
    using progress = new Progress(`reading ${beforePath}`, !json);
    const [before, after] = (await loadSnapshots([beforePath, afterPath], flags, progress, context)) as [LoadedSnapshot, LoadedSnapshot];
    progress.stop();
    const device = before.device ?? after.device;
    const comparison = compareSnapshots(before.snapshot, after.snapshot, device);
    if (flags.output !== undefined) {
      const svg = toFlameGraphSvg(comparisonStacks(before.snapshot, after.snapshot, comparison), {
        title: `Segments of ${before.source} and ${after.source} that the other lacks`,
      });
      writeOutput(context, flags.output, svg);
    }
    if (flags.output === '-') return;
    if (json) context.out(`${JSON.stringify({ beforeSource: before.source, afterSource: after.source, ...comparison, ...(flags.output ? { output: flags.output } : {}) })}\n`);
    else context.out(`${formatComparison(comparison, { before: before.source, after: after.source })}${flags.output ? `Wrote ${flags.output}: the segments only one side has, as a flame graph.\n` : ''}`);
  });
}
