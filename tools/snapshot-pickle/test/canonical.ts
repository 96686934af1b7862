import { spawnSync } from 'node:child_process';
import type { PickleValue } from '@stowage/snapshot-pickle';
import { isPickleDict, PickleFloat, PickleTuple } from '@stowage/snapshot-pickle';

/** A value as a tagged JSON tree, so that Python's and ours compare type for type: ['int', '5'], ['tuple', […]]. */
export type Canonical = [string, ...unknown[]];

export function canonical(value: PickleValue): Canonical {
  if (value === null) return ['None'];
  if (typeof value === 'boolean') return ['bool', value];
  if (typeof value === 'number') return Number.isSafeInteger(value) && !Object.is(value, -0) ? ['int', String(value)] : ['float', floatHex(value)];
  if (typeof value === 'bigint') return ['int', value.toString()];
  if (typeof value === 'string') return ['str', value];
  if (value instanceof Uint8Array) return ['bytes', Buffer.from(value).toString('hex')];
  if (value instanceof PickleFloat) return ['float', floatHex(value.value)];
  if (value instanceof PickleTuple) return ['tuple', value.items.map(canonical)];
  if (Array.isArray(value)) return ['list', value.map(canonical)];
  if (isPickleDict(value)) return ['dict', Object.entries(value).map(([k, v]) => [k, canonical(v)])];
  throw new Error(`not a PickleValue: ${String(value)}`);
}

function floatHex(value: number): string {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, value, false);
  return Buffer.from(view.buffer).toString('hex');
}

/** The same tagging in Python, for values `pickle.load` returns. */
export const PYTHON_CANONICAL = `
import struct
def canon(v):
    if v is None: return ['None']
    if isinstance(v, bool): return ['bool', v]
    if isinstance(v, int): return ['int', str(v)]
    if isinstance(v, float): return ['float', struct.pack('>d', v).hex()]
    if isinstance(v, str): return ['str', v]
    if isinstance(v, bytes): return ['bytes', v.hex()]
    if isinstance(v, tuple): return ['tuple', [canon(x) for x in v]]
    if isinstance(v, list): return ['list', [canon(x) for x in v]]
    if isinstance(v, dict): return ['dict', [[k, canon(x)] for k, x in v.items()]]
    raise TypeError(type(v).__name__)
`;

/** True when `python3` runs here. */
export function hasPython(): boolean {
  return spawnSync('python3', ['-c', 'import pickle'], { stdio: 'ignore' }).status === 0;
}

/** Runs a Python script with `input` on its standard input; returns its standard output, or throws with its error. */
export function runPython(script: string, input: Uint8Array = new Uint8Array(0)): string {
  const run = spawnSync('python3', ['-c', script], { input, maxBuffer: 1 << 30, encoding: 'buffer' });
  if (run.error) throw run.error;
  if (run.status !== 0) throw new Error(`python3 failed (${run.status}): ${run.stderr.toString()}`);
  return run.stdout.toString();
}
