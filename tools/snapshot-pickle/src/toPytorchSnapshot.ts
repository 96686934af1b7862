import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotFrame, SnapshotSegment, SnapshotTraceEntry } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';
import type { PickleDict, PickleValue } from './PickleValue.js';
import { isPickleDict, PickleFloat, PickleTuple } from './PickleValue.js';
import { writePickle } from './writePickle.js';

/** `allocator_settings` keys that PyTorch writes as Python floats even when their value is integral. */
const FLOAT_SETTINGS: ReadonlySet<string> = new Set(['garbage_collection_threshold']);

/**
 * A Stowage snapshot as the dict `torch.cuda.memory._snapshot()` returns, key for key and type for type:
 * `segment_pool_id` a tuple, `garbage_collection_threshold` a float, frames `{name, filename, line}`, keys in
 * PyTorch's order. `device_free` appears on `oom` entries only, as in PyTorch.
 * @throws InvalidArgumentError naming the field when `snapshot` is not a MemorySnapshot (a setting that is not
 * plain data, a missing list)
 */
export function toPytorchSnapshot(snapshot: MemorySnapshot): PickleDict {
  if (!isPickleDict(snapshot) || !Array.isArray(snapshot.segments) || !Array.isArray(snapshot.device_traces)) {
    throw new InvalidArgumentError('snapshot', snapshot, 'a MemorySnapshot (what allocator.snapshot() returns)');
  }
  const frames = new FrameTable();
  return {
    segments: snapshot.segments.map((s) => segmentDict(s, frames)),
    device_traces: snapshot.device_traces.map((trace) => trace.map((e) => traceEntryDict(e, frames))),
    allocator_settings: settingsDict(snapshot.allocator_settings ?? {}),
    external_annotations: plainData('snapshot.external_annotations', snapshot.external_annotations ?? []),
  };
}

/**
 * A Stowage snapshot as a pickle that PyTorch's memory viewer (pytorch.org/memory_viz) and Python's
 * `pickle.load` open: `writePickle(toPytorchSnapshot(snapshot))`, protocol 4.
 * @throws InvalidArgumentError as toPytorchSnapshot does
 */
export function writeSnapshotPickle(snapshot: MemorySnapshot): Uint8Array {
  return writePickle(toPytorchSnapshot(snapshot));
}

function segmentDict(s: SnapshotSegment, frames: FrameTable): PickleDict {
  return {
    device: s.device,
    address: s.address,
    total_size: s.total_size,
    allocated_size: s.allocated_size,
    active_size: s.active_size,
    requested_size: s.requested_size,
    stream: s.stream,
    segment_type: s.segment_type,
    segment_pool_id: new PickleTuple(s.segment_pool_id ?? [0, 0]),
    is_expandable: s.is_expandable,
    frames: frames.list(s.frames),
    blocks: s.blocks.map((b) => ({ address: b.address, size: b.size, requested_size: b.requested_size, state: b.state, frames: frames.list(b.frames) })),
  };
}

function traceEntryDict(e: SnapshotTraceEntry, frames: FrameTable): PickleDict {
  const entry: PickleDict = {
    action: e.action,
    addr: e.addr,
    size: e.size,
    stream: e.stream,
    time_us: e.time_us,
    compile_context: e.compile_context ?? 'N/A',
    user_metadata: e.user_metadata ?? '',
    frames: frames.list(e.frames),
  };
  if (e.device_free !== undefined) entry.device_free = e.device_free;
  return entry;
}

function settingsDict(settings: Readonly<Record<string, unknown>>): PickleDict {
  const out = plainData('snapshot.allocator_settings', settings);
  if (!isPickleDict(out)) throw new InvalidArgumentError('snapshot.allocator_settings', settings, 'an object');
  for (const key of FLOAT_SETTINGS) {
    const value = out[key];
    if (typeof value === 'number') out[key] = new PickleFloat(value);
  }
  return out;
}

/** Copies JSON-like data (null, booleans, numbers, strings, arrays, plain objects) as a PickleValue; drops undefined members. */
function plainData(path: string, value: unknown): PickleValue {
  if (value === null || typeof value === 'boolean' || typeof value === 'number' || typeof value === 'string' || typeof value === 'bigint') return value;
  if (Array.isArray(value)) return value.map((v, i) => plainData(`${path}[${i}]`, v));
  if (isPickleDict(value)) {
    const out: PickleDict = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = plainData(`${path}.${k}`, v);
    return out;
  }
  throw new InvalidArgumentError(path, value, 'plain data (null, a boolean, number, string, array or plain object)');
}

/**
 * Frames as PyTorch's dicts, one dict per distinct frame and one list per distinct frame list (by identity), so
 * that the pickle memoizes repeated frames rather than writing them again, as PyTorch's own pickles do.
 */
class FrameTable {
  readonly #dicts = new Map<string, PickleDict>();
  readonly #lists = new WeakMap<readonly SnapshotFrame[], PickleDict[]>();

  list(frames: readonly SnapshotFrame[] | undefined): PickleDict[] {
    if (frames === undefined) return [];
    let list = this.#lists.get(frames);
    if (list === undefined) {
      list = frames.map((f) => this.#dict(f));
      this.#lists.set(frames, list);
    }
    return list;
  }

  #dict(f: SnapshotFrame): PickleDict {
    const key = `${f.name}\0${f.filename}\0${f.line}`;
    let dict = this.#dicts.get(key);
    if (dict === undefined) {
      dict = { name: f.name, filename: f.filename, line: f.line };
      this.#dicts.set(key, dict);
    }
    return dict;
  }
}
