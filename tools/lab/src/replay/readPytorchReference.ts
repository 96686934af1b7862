import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkString } from '@stowage/core/plugin-kit';

/** What PyTorch's own allocator did on one trace, as the trace root's README table records it. */
export interface PytorchReference {
  readonly trace: string;
  /** Segments PyTorch's allocator created replaying from a cold start. */
  readonly segments: number;
  /** PyTorch's peak reserved bytes, in GiB with three decimals (as printed). */
  readonly peakReservedGiB: number;
  /** Peak reserved over peak live bytes. */
  readonly ratio: number;
  /** True when an engine following PyTorch's rules must reproduce segments and peak exactly. */
  readonly mustMatch: boolean;
}

const COLUMNS = {
  trace: 'trace',
  segments: 'pytorch segments',
  peak: 'pytorch peak reserved gib',
  ratio: 'pytorch r/a',
  mustMatch: 'must match',
} as const;

/**
 * Reads the reference table from `<traceRoot>/README.md` at run time (the numbers are never copied into the
 * project). Returns one entry per row whose numbers parse; empty when the README or the table is missing.
 * @throws InvalidArgumentError when `traceRoot` is not a non-empty string
 */
export function readPytorchReference(traceRoot: string): Map<string, PytorchReference> {
  checkString('traceRoot', traceRoot, 'the path of a trace root (a non-empty string; see findTraceRoot)');
  const rows = new Map<string, PytorchReference>();
  let text: string;
  try {
    text = readFileSync(join(traceRoot, 'README.md'), 'utf8');
  } catch {
    return rows;
  }
  let at: Record<keyof typeof COLUMNS, number> | undefined;
  for (const line of text.split('\n')) {
    if (!line.trim().startsWith('|')) {
      at = undefined;
      continue;
    }
    const cells = line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim());
    if (at === undefined) {
      const lower = cells.map((c) => c.toLowerCase());
      const found = Object.fromEntries(Object.entries(COLUMNS).map(([k, name]) => [k, lower.indexOf(name)])) as Record<keyof typeof COLUMNS, number>;
      if (found.trace >= 0 && found.ratio >= 0) at = found;
      continue;
    }
    const trace = cells[at.trace]?.replace(/`/g, '');
    const segments = Number(cells[at.segments]);
    const peakReservedGiB = Number(cells[at.peak]);
    const ratio = Number(cells[at.ratio]);
    if (!trace || cells[at.ratio] === '' || !Number.isFinite(ratio)) continue;
    rows.set(trace, { trace, segments, peakReservedGiB, ratio, mustMatch: cells[at.mustMatch]?.toLowerCase() === 'yes' });
  }
  return rows;
}
