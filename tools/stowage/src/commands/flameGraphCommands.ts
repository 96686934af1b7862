import type { Command } from 'commander';
import { formatBytes } from '@stowage/core';
import type { CliContext } from '../CliContext.js';
import { segmentStacks, toFlameGraphSvg } from '../flameGraph.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import { checkOutputPath, writeOutput } from '../writeOutput.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadSnapshot, withReplayOptions } from './replayOptions.js';

/**
 * `stowage segments <input> -o segments.svg` and `stowage memory <input> -o memory.svg`: a snapshot's blocks as a
 * flame graph (SVG), as PyTorch's `_memory_viz segments` and `memory` draw them: by stream, segment (`segments`
 * only), state and allocation stack, widths in bytes. A trace is replayed through `--allocator` to its end first.
 */
export function addFlameGraphCommands(program: Command, context: CliContext): void {
  for (const kind of ['segments', 'memory'] as const) {
    const bySegment = kind === 'segments';
    withReplayOptions(
      program
        .command(kind)
        .description(
          bySegment
            ? "draw a snapshot's segments as a flame graph (SVG): stream, segment, block state, allocation stack; as PyTorch's _memory_viz segments"
            : "draw a snapshot's memory as a flame graph (SVG): stream, block state, allocation stack, segments merged; as PyTorch's _memory_viz memory",
        )
        .argument('<input>', INPUT_FORMATS)
        .option('-o, --output <file>', 'the SVG file to write (- for standard output)', `${kind}.svg`),
    ).action(async (path: string, flags: ReplayFlags & { output: string }, command: Command) => {
      const json = isJson(command);
      checkOutputPath('-o', flags.output);
      using progress = new Progress(`reading ${path}`, !json);
      const loaded = await loadSnapshot(path, flags, progress, context);
      progress.stop();
      const stacks = segmentStacks(loaded.snapshot, { bySegment, device: loaded.device });
      const bytes = stacks.reduce((n, s) => n + s.bytes, 0);
      const svg = toFlameGraphSvg(stacks, { title: `${bySegment ? 'Segments' : 'Memory'} of ${loaded.source}` });
      writeOutput(context, flags.output, svg);
      if (flags.output === '-') return;
      const segments = loaded.snapshot.segments.filter((s) => loaded.device === undefined || s.device === loaded.device).length;
      if (json) context.out(`${JSON.stringify({ output: flags.output, kind, segments, stacks: stacks.length, bytes })}\n`);
      else context.out(`Wrote ${flags.output}: ${segments} segments, ${formatBytes(bytes)} reserved, as a flame graph (open it in a browser; hover a box for its stack).\n`);
    });
  }
}
