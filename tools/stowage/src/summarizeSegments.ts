import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotSegment } from '@stowage/core/plugin-kit';
import { formatBytes } from '@stowage/core';

/** How one segment is filled. Invariant: `totalBytes == allocatedBytes + roundingBytes + pendingBytes + freeBytes`. */
export interface SegmentFill {
  readonly device: number;
  readonly address: number;
  readonly stream: number;
  readonly totalBytes: number;
  /** Requested bytes of its allocated blocks. */
  readonly allocatedBytes: number;
  /** Internal free memory: allocated blocks' size beyond what was requested (the allocator's rounding). */
  readonly roundingBytes: number;
  /** Blocks freed but waiting on a stream (`active_pending_free`). */
  readonly pendingBytes: number;
  /** External free memory: the inactive blocks, cached for reuse. */
  readonly freeBytes: number;
  /** The largest inactive block: the biggest request this segment could serve now. */
  readonly largestFreeBytes: number;
  readonly blocks: number;
  /**
   * One character per page of the segment: ` ` nothing allocated; a letter (`a`…`z`, one per allocated block in
   * address order) a page that one block's requested bytes touch alone; `0`…`9` a page that several touch, in
   * tenths filled; `*` a page that several fill entirely.
   */
  readonly pages: string;
}

/** The segments of a snapshot summed, as `stowage stats` prints them. Same invariant as {@link SegmentFill}. */
export interface SegmentSummary {
  readonly pageBytes: number;
  /** Sorted by size, then allocated bytes (as PyTorch's `_memory_viz stats` sorts them). */
  readonly segments: readonly SegmentFill[];
  readonly totalBytes: number;
  readonly allocatedBytes: number;
  readonly roundingBytes: number;
  readonly pendingBytes: number;
  readonly freeBytes: number;
  readonly largestFreeBytes: number;
}

/** PyTorch's `_memory_viz stats` draws a character per 20 MiB (a large segment's size). */
export const DEFAULT_PAGE_BYTES = 20 << 20;

/**
 * How the segments of `snapshot` (of `device`, or all) are filled: per segment and in total, with a page map.
 * @param pageBytes the bytes one character of a page map stands for
 */
export function summarizeSegments(snapshot: MemorySnapshot, options: { readonly device?: number | undefined; readonly pageBytes?: number } = {}): SegmentSummary {
  const pageBytes = options.pageBytes ?? DEFAULT_PAGE_BYTES;
  const segments = snapshot.segments
    .filter((s) => options.device === undefined || s.device === options.device)
    .map((s) => fillOf(s, pageBytes))
    .sort((a, b) => a.totalBytes - b.totalBytes || a.allocatedBytes - b.allocatedBytes || a.address - b.address);
  const sum = (pick: (s: SegmentFill) => number): number => segments.reduce((n, s) => n + pick(s), 0);
  return {
    pageBytes,
    segments,
    totalBytes: sum((s) => s.totalBytes),
    allocatedBytes: sum((s) => s.allocatedBytes),
    roundingBytes: sum((s) => s.roundingBytes),
    pendingBytes: sum((s) => s.pendingBytes),
    freeBytes: sum((s) => s.freeBytes),
    largestFreeBytes: Math.max(0, ...segments.map((s) => s.largestFreeBytes)),
  };
}

function fillOf(segment: SnapshotSegment, pageBytes: number): SegmentFill {
  let allocatedBytes = 0;
  let roundingBytes = 0;
  let pendingBytes = 0;
  let freeBytes = 0;
  let largestFreeBytes = 0;
  const pageCount = Math.max(1, Math.ceil(segment.total_size / pageBytes));
  const filled = new Float64Array(pageCount);
  const touching = new Int32Array(pageCount);
  const letter: string[] = new Array<string>(pageCount).fill(' ');
  let allocatedIndex = 0;
  for (const block of segment.blocks) {
    if (block.state === 'active_allocated') {
      allocatedBytes += block.requested_size;
      roundingBytes += block.size - block.requested_size;
      const start = block.address - segment.address;
      const end = start + block.requested_size;
      const mark = String.fromCharCode(97 + (allocatedIndex++ % 26));
      for (let page = Math.floor(start / pageBytes); page < pageCount && page * pageBytes < end; page++) {
        filled[page]! += Math.min(end, (page + 1) * pageBytes) - Math.max(start, page * pageBytes);
        if (touching[page]!++ === 0) letter[page] = mark;
      }
    } else if (block.state === 'active_pending_free') pendingBytes += block.size;
    else {
      freeBytes += block.size;
      largestFreeBytes = Math.max(largestFreeBytes, block.size);
    }
  }
  let pages = '';
  for (let page = 0; page < pageCount; page++) {
    if (touching[page] === 0) pages += ' ';
    else if (touching[page] === 1) pages += letter[page];
    else pages += '0123456789*'[Math.min(10, Math.floor((filled[page]! / Math.min(pageBytes, segment.total_size - page * pageBytes)) * 10))];
  }
  return {
    device: segment.device,
    address: segment.address,
    stream: segment.stream,
    totalBytes: segment.total_size,
    allocatedBytes,
    roundingBytes,
    pendingBytes,
    freeBytes,
    largestFreeBytes,
    blocks: segment.blocks.length,
    pages,
  };
}

/**
 * The summary as text: a page map and figures for each segment of at least `pageBytes`, one line for the smaller
 * ones, the totals, and a legend.
 */
export function formatSegmentSummary(summary: SegmentSummary): string {
  const { pageBytes } = summary;
  const large = summary.segments.filter((s) => s.totalBytes >= pageBytes);
  const small = summary.segments.filter((s) => s.totalBytes < pageBytes);
  const lines = [`Segments of ${formatBytes(pageBytes)} and more, smallest first (one character per ${formatBytes(pageBytes)}):`];
  for (const s of large) {
    const stream = s.stream === 0 ? '' : `, stream ${s.stream}`;
    lines.push(`[${s.pages}] ${formatBytes(s.totalBytes)}: ${formatBytes(s.allocatedBytes)} allocated, ${formatFree(s.freeBytes + s.pendingBytes, s.roundingBytes)} free${stream}`);
  }
  if (large.length === 0) lines.push('(none)');
  if (small.length > 0) {
    const sum = (pick: (s: SegmentFill) => number): number => small.reduce((n, s) => n + pick(s), 0);
    lines.push(`${small.length} segment${small.length === 1 ? '' : 's'} under ${formatBytes(pageBytes)}: ${formatBytes(sum((s) => s.totalBytes))}, ${formatBytes(sum((s) => s.allocatedBytes))} allocated, ${formatFree(sum((s) => s.freeBytes + s.pendingBytes), sum((s) => s.roundingBytes))} free`);
  }
  const free = summary.freeBytes + summary.pendingBytes;
  lines.push(
    '',
    `segments: ${summary.segments.length}`,
    `reserved: ${formatBytes(summary.totalBytes)}`,
    `allocated: ${formatBytes(summary.allocatedBytes)} (requested)`,
    `free: ${formatFree(free, summary.roundingBytes)}${summary.pendingBytes > 0 ? `, of which ${formatBytes(summary.pendingBytes)} waits on a stream` : ''}`,
    `largest free block: ${formatBytes(summary.largestFreeBytes)}`,
    '',
    'Legend:',
    `  [ab  3*] a segment, one character per ${formatBytes(pageBytes)} of it`,
    "  a-z      a page one allocated block touches alone (the blocks lettered in address order)",
    "  ' '      a page with nothing allocated",
    '  0-9      a page several blocks touch, filled in tenths (9: 90 %)',
    '  *        a page several blocks fill',
    '  internal free is rounding (a block larger than its request); external free is cached blocks and gaps',
  );
  return `${lines.join('\n')}\n`;
}

function formatFree(external: number, internal: number): string {
  const total = external + internal;
  return total === 0 ? '0 B' : `${formatBytes(total)} (${((internal / total) * 100).toFixed(1)} % internal)`;
}
