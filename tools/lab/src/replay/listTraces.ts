import { readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { checkString } from '@stowage/core/plugin-kit';

/** Where a trace came from: PyTorch snapshots, compiler lifetime tables, or an RMM replay log. */
export type TraceKind = 'pytorch' | 'static' | 'rmm-csv';

/** One trace file under a trace root. */
export interface TraceFile {
  /** The file name without `.jsonl.gz` or `.csv`, e.g. `cs336_2p7b_ctx128_forward_fp32`. */
  readonly name: string;
  /** Absolute path when `root` was absolute. */
  readonly path: string;
  readonly kind: TraceKind;
}

const JSONL_GZ = '.jsonl.gz';
const CSV = '.csv';

/**
 * Lists the traces under a trace root (see `findTraceRoot`): every `*.jsonl.gz` under `pytorch/` and `static/`
 * (at any depth) and every `*.csv` anywhere under `root`, sorted by name (then path). Missing subdirectories
 * contribute nothing; a missing or unreadable `root` gives an empty list.
 * @throws InvalidArgumentError when `root` is not a non-empty string
 */
export function listTraces(root: string): TraceFile[] {
  checkString('root', root, 'the path of a trace root (a non-empty string; see findTraceRoot)');
  const traces: TraceFile[] = [];
  for (const kind of ['pytorch', 'static'] as const) {
    for (const path of walk(join(root, kind))) {
      if (path.endsWith(JSONL_GZ)) traces.push({ name: basename(path, JSONL_GZ), path, kind });
    }
  }
  for (const path of walk(root)) {
    if (path.endsWith(CSV)) traces.push({ name: basename(path, CSV), path, kind: 'rmm-csv' });
  }
  return traces.sort((a, b) => compare(a.name, b.name) || compare(a.path, b.path));
}

/** Paths of the regular files under `dir`, at any depth. */
function walk(dir: string): string[] {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return walk(path);
    return e.isFile() ? [path] : [];
  });
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
