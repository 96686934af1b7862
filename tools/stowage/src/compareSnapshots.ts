import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotSegment } from '@stowage/core/plugin-kit';
import { formatBytes } from '@stowage/core';
import { formatTable } from './formatTable.js';
import type { FlameStack } from './flameGraph.js';
import { segmentName, segmentStacks } from './flameGraph.js';

/** A segment that one snapshot has and the other does not. */
export interface ComparedSegment {
  readonly device: number;
  readonly address: number;
  readonly stream: number;
  readonly totalBytes: number;
  /** Requested bytes of its allocated blocks. */
  readonly allocatedBytes: number;
}

/** Two snapshots' segments diffed, as PyTorch's `_memory_viz compare` does: a segment is its device, address and size. */
export interface SnapshotComparison {
  readonly onlyBefore: readonly ComparedSegment[];
  readonly onlyAfter: readonly ComparedSegment[];
  /** Segments both have (same device, address and size). */
  readonly inBoth: number;
  readonly before: { readonly segments: number; readonly reservedBytes: number; readonly allocatedBytes: number };
  readonly after: { readonly segments: number; readonly reservedBytes: number; readonly allocatedBytes: number };
}

/** Diffs the segments of `before` and `after` (of `device`, or all), largest first on each side. */
export function compareSnapshots(before: MemorySnapshot, after: MemorySnapshot, device?: number): SnapshotComparison {
  const pick = (s: MemorySnapshot): SnapshotSegment[] => s.segments.filter((seg) => device === undefined || seg.device === device);
  const a = pick(before);
  const b = pick(after);
  const keysOf = (segments: SnapshotSegment[]): Set<string> => new Set(segments.map(keyOf));
  const aKeys = keysOf(a);
  const bKeys = keysOf(b);
  const only = (segments: SnapshotSegment[], other: Set<string>): ComparedSegment[] =>
    segments
      .filter((s) => !other.has(keyOf(s)))
      .map((s) => ({ device: s.device, address: s.address, stream: s.stream, totalBytes: s.total_size, allocatedBytes: allocatedOf(s) }))
      .sort((x, y) => y.totalBytes - x.totalBytes || x.address - y.address);
  const figures = (segments: SnapshotSegment[]) => ({
    segments: segments.length,
    reservedBytes: segments.reduce((n, s) => n + s.total_size, 0),
    allocatedBytes: segments.reduce((n, s) => n + allocatedOf(s), 0),
  });
  return { onlyBefore: only(a, bKeys), onlyAfter: only(b, aKeys), inBoth: a.filter((s) => bKeys.has(keyOf(s))).length, before: figures(a), after: figures(b) };
}

/** The flame-graph stacks of the segments only one side has, under `only before` and `only after`. */
export function comparisonStacks(before: MemorySnapshot, after: MemorySnapshot, comparison: SnapshotComparison): FlameStack[] {
  const keep = (s: MemorySnapshot, side: readonly ComparedSegment[]) => {
    const keys = new Set(side.map((c) => `${c.device}:${c.address}:${c.totalBytes}`));
    return { segments: s.segments.filter((seg) => keys.has(keyOf(seg))) };
  };
  return [
    ...segmentStacks(keep(before, comparison.onlyBefore), { bySegment: true, prefix: ['only before'] }),
    ...segmentStacks(keep(after, comparison.onlyAfter), { bySegment: true, prefix: ['only after'] }),
  ];
}

/** The comparison as text: the figures of both sides, then each side's own segments. */
export function formatComparison(comparison: SnapshotComparison, names: { readonly before: string; readonly after: string }): string {
  const { before, after } = comparison;
  const signed = (n: number, format: (v: number) => string): string => (n === 0 ? '0' : `${n > 0 ? '+' : '-'}${format(Math.abs(n))}`);
  const table = formatTable(
    ['', 'before', 'after', 'change'],
    [
      ['segments', String(before.segments), String(after.segments), signed(after.segments - before.segments, String)],
      ['reserved', formatBytes(before.reservedBytes), formatBytes(after.reservedBytes), signed(after.reservedBytes - before.reservedBytes, formatBytes)],
      ['allocated (requested)', formatBytes(before.allocatedBytes), formatBytes(after.allocatedBytes), signed(after.allocatedBytes - before.allocatedBytes, formatBytes)],
    ],
  );
  const side = (label: string, segments: readonly ComparedSegment[]): string[] => {
    const total = segments.reduce((n, s) => n + s.totalBytes, 0);
    const head = `${segments.length} segment${segments.length === 1 ? '' : 's'} only ${label} (${formatBytes(total)})${segments.length > 0 ? ':' : ''}`;
    return [head, ...segments.map((s) => `  ${segmentName(s.address, s.totalBytes)}, ${formatBytes(s.allocatedBytes)} allocated${s.stream === 0 ? '' : `, stream ${s.stream}`}${s.device === 0 ? '' : `, device ${s.device}`}`)];
  };
  return [`before: ${names.before}`, `after:  ${names.after}`, '', table, '', `${comparison.inBoth} segments in both`, ...side('before', comparison.onlyBefore), ...side('after', comparison.onlyAfter), ''].join('\n');
}

function keyOf(s: SnapshotSegment): string {
  return `${s.device}:${s.address}:${s.total_size}`;
}

function allocatedOf(s: SnapshotSegment): number {
  return s.blocks.reduce((n, b) => n + (b.state === 'active_allocated' ? b.requested_size : 0), 0);
}
