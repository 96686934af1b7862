import type { Command } from 'commander';
import { InvalidArgumentError, parseBytes } from '@stowage/core';
import type { CliContext } from '../CliContext.js';
import { Progress } from '../Progress.js';
import { INPUT_FORMATS } from '../readInput.js';
import { DEFAULT_PAGE_BYTES, formatSegmentSummary, summarizeSegments } from '../summarizeSegments.js';
import type { ReplayFlags } from './replayOptions.js';
import { isJson, loadSnapshot, withReplayOptions } from './replayOptions.js';

/**
 * `stowage stats <input>`: how a snapshot's segments are filled, as text (PyTorch's `python -m
 * torch.cuda._memory_viz stats`): a page map per segment, allocated and free bytes (internal: rounding; external:
 * cached blocks), and totals. A trace is replayed through `--allocator` to its end first.
 */
export function addStatsCommand(program: Command, context: CliContext): void {
  withReplayOptions(
    program
      .command('stats')
      .description("summarize how a snapshot's segments are filled (a page map per segment, free bytes internal and external), as PyTorch's _memory_viz stats; a trace is replayed to its end")
      .argument('<input>', INPUT_FORMATS)
      .option('--page <bytes>', 'the bytes one character of a page map stands for; smaller segments are summed in one line', '20MiB'),
  ).action(async (path: string, flags: ReplayFlags & { page: string }, command: Command) => {
    const json = isJson(command);
    const pageBytes = parseBytes(flags.page);
    if (pageBytes === undefined || !Number.isSafeInteger(pageBytes) || pageBytes <= 0) throw new InvalidArgumentError('--page', flags.page, `a positive byte size such as '2MiB' (default ${DEFAULT_PAGE_BYTES >> 20}MiB)`);
    using progress = new Progress(`reading ${path}`, !json);
    const loaded = await loadSnapshot(path, flags, progress, context);
    progress.stop();
    const summary = summarizeSegments(loaded.snapshot, { device: loaded.device, pageBytes });
    if (json) context.out(`${JSON.stringify({ source: loaded.source, ...summary })}\n`);
    else context.out(`${loaded.source}${loaded.device === undefined ? '' : `, device ${loaded.device}`}\n${formatSegmentSummary(summary)}`);
  });
}
