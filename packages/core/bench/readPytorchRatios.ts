import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The README column with PyTorch's peak reserved over peak live bytes, and the column naming the trace. */
const RATIO_COLUMN = 'pytorch r/a';
const TRACE_COLUMN = 'trace';

/**
 * PyTorch's own R/A (peak reserved / peak live) per trace name, read from the markdown table in the trace root's
 * README.md at run time. Empty when the README or the table is missing; rows whose ratio is not a number are
 * left out.
 */
export function readPytorchRatios(traceRoot: string): Map<string, number> {
  const ratios = new Map<string, number>();
  let text: string;
  try {
    text = readFileSync(join(traceRoot, 'README.md'), 'utf8');
  } catch {
    return ratios;
  }
  let traceAt = -1;
  let ratioAt = -1;
  for (const line of text.split('\n')) {
    if (!line.trim().startsWith('|')) {
      traceAt = ratioAt = -1;
      continue;
    }
    const cells = line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim());
    if (traceAt < 0) {
      const lower = cells.map((c) => c.toLowerCase());
      if (lower.includes(TRACE_COLUMN) && lower.includes(RATIO_COLUMN)) {
        traceAt = lower.indexOf(TRACE_COLUMN);
        ratioAt = lower.indexOf(RATIO_COLUMN);
      }
      continue;
    }
    const name = cells[traceAt]?.replace(/`/g, '');
    const ratio = Number(cells[ratioAt]);
    if (name && cells[ratioAt] !== '' && Number.isFinite(ratio)) ratios.set(name, ratio);
  }
  return ratios;
}
