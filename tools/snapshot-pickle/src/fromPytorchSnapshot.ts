import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotAction, SnapshotBlock, SnapshotBlockState, SnapshotFrame, SnapshotSegment, SnapshotTraceEntry } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';
import type { PickleDict, PickleValue } from './PickleValue.js';
import { isPickleDict, PickleFloat, PickleTuple } from './PickleValue.js';
import { readPickle } from './readPickle.js';

const ACTIONS: readonly SnapshotAction[] = ['alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'segment_map', 'segment_unmap', 'oom', 'snapshot'];
const BLOCK_STATES: readonly SnapshotBlockState[] = ['active_allocated', 'active_pending_free', 'inactive'];

/**
 * A PyTorch snapshot (the dict `torch.cuda.memory._snapshot()` returns, read by `readPickle`) as a Stowage
 * {@link MemorySnapshot}. Keys that older PyTorch releases leave out get the defaults PyTorch's viewer gives
 * them: a block's `address` runs on from its segment's, its `requested_size` and `frames` come from its first
 * `history` record (the legacy form) or are its size and empty, `time_us` is 0, `compile_context` 'N/A',
 * `user_metadata` ''. Trace entries of actions Stowage does not know
 * (newer PyTorch releases add some) are left out; keys Stowage does not know are ignored.
 * @throws InvalidArgumentError naming the first field that does not fit (`snapshot.segments[3].total_size must be
 * a non-negative safe integer`)
 */
export function fromPytorchSnapshot(value: PickleValue): MemorySnapshot {
  const root = dict('snapshot', value, 'a PyTorch memory snapshot (a dict with segments and device_traces)');
  const frames = new FrameReader();
  const owned = new OwnedObjects();
  const segments = list('snapshot.segments', root.segments).map((s, i) => readSegment(`snapshot.segments[${i}]`, owned.claim(`snapshot.segments[${i}]`, s), frames, owned));
  const device_traces = list('snapshot.device_traces', root.device_traces ?? []).map((trace, d) => {
    const entries: SnapshotTraceEntry[] = [];
    list(`snapshot.device_traces[${d}]`, owned.claim(`snapshot.device_traces[${d}]`, trace)).forEach((e, i) => {
      const entry = readTraceEntry(`snapshot.device_traces[${d}][${i}]`, owned.claim(`snapshot.device_traces[${d}][${i}]`, e), frames);
      if (entry) entries.push(entry);
    });
    return entries;
  });
  const settings = root.allocator_settings === undefined ? {} : dict('snapshot.allocator_settings', root.allocator_settings, 'a dict');
  return {
    segments,
    device_traces,
    allocator_settings: jsonSettings(settings) as Record<string, unknown>,
    external_annotations: root.external_annotations === undefined ? [] : [...list('snapshot.external_annotations', root.external_annotations)],
  };
}

/**
 * Reads a pickle that `torch.cuda.memory._dump_snapshot` wrote: `fromPytorchSnapshot(readPickle(bytes))`.
 * @throws UnsafePickleError, MalformedPickleError as readPickle does; InvalidArgumentError as fromPytorchSnapshot does
 */
export function readSnapshotPickle(bytes: Uint8Array): MemorySnapshot {
  return fromPytorchSnapshot(readPickle(bytes));
}

function readSegment(path: string, value: PickleValue, frames: FrameReader, owned: OwnedObjects): SnapshotSegment {
  const s = dict(path, value, 'a segment dict');
  const address = count(`${path}.address`, s.address);
  let next = address;
  const blocks = list(`${path}.blocks`, owned.claim(`${path}.blocks`, s.blocks)).map((b, i): SnapshotBlock => {
    const at = `${path}.blocks[${i}]`;
    const block = dict(at, owned.claim(at, b), 'a block dict');
    const size = count(`${at}.size`, block.size);
    const blockAddress = block.address === undefined ? next : count(`${at}.address`, block.address);
    next = blockAddress + size;
    // PyTorch's legacy form kept a block's frames and requested size in its first `history` record.
    const history = Array.isArray(block.history) && isPickleDict(block.history[0]) ? block.history[0] : undefined;
    const requested =
      block.requested_size !== undefined ? count(`${at}.requested_size`, block.requested_size) : history?.real_size !== undefined ? count(`${at}.history[0].real_size`, history.real_size) : size;
    return {
      address: blockAddress,
      size,
      requested_size: requested,
      state: oneOf(`${at}.state`, block.state, BLOCK_STATES),
      frames: block.frames === undefined && history !== undefined ? frames.read(`${at}.history[0].frames`, history.frames) : frames.read(`${at}.frames`, block.frames),
    };
  });
  const total = count(`${path}.total_size`, s.total_size);
  const sum = (pick: (b: SnapshotBlock) => number) => blocks.reduce((n, b) => n + pick(b), 0);
  return {
    device: s.device === undefined ? 0 : count(`${path}.device`, s.device),
    address,
    total_size: total,
    allocated_size: s.allocated_size === undefined ? sum((b) => (b.state === 'active_allocated' ? b.size : 0)) : count(`${path}.allocated_size`, s.allocated_size),
    active_size: s.active_size === undefined ? sum((b) => (b.state === 'inactive' ? 0 : b.size)) : count(`${path}.active_size`, s.active_size),
    requested_size: s.requested_size === undefined ? sum((b) => b.requested_size) : count(`${path}.requested_size`, s.requested_size),
    stream: s.stream === undefined ? 0 : count(`${path}.stream`, s.stream),
    segment_type: s.segment_type === undefined ? 'large' : oneOf(`${path}.segment_type`, s.segment_type, ['small', 'large'] as const),
    segment_pool_id: s.segment_pool_id === undefined ? [0, 0] : poolId(`${path}.segment_pool_id`, s.segment_pool_id),
    is_expandable: s.is_expandable === undefined ? false : bool(`${path}.is_expandable`, s.is_expandable),
    frames: frames.read(`${path}.frames`, s.frames),
    blocks,
  };
}

function readTraceEntry(path: string, value: PickleValue, frames: FrameReader): SnapshotTraceEntry | undefined {
  const e = dict(path, value, 'a trace entry dict');
  const action = str(`${path}.action`, e.action);
  if (!(ACTIONS as readonly string[]).includes(action)) return undefined;
  const entry: SnapshotTraceEntry = {
    action: action as SnapshotAction,
    addr: e.addr === undefined ? 0 : count(`${path}.addr`, e.addr),
    size: count(`${path}.size`, e.size),
    stream: e.stream === undefined ? 0 : count(`${path}.stream`, e.stream),
    time_us: e.time_us === undefined || e.time_us === null ? 0 : count(`${path}.time_us`, e.time_us),
    frames: frames.read(`${path}.frames`, e.frames),
    compile_context: e.compile_context === undefined ? 'N/A' : str(`${path}.compile_context`, e.compile_context),
    user_metadata: e.user_metadata === undefined ? '' : str(`${path}.user_metadata`, e.user_metadata),
  };
  return e.device_free === undefined ? entry : { ...entry, device_free: count(`${path}.device_free`, e.device_free) };
}

// Note [Shared objects in snapshot pickles]
// The memo lets a pickle refer to one object many times for two bytes each. PyTorch's pickles share frame
// lists and frame dicts (FrameReader reads each list once), but never a segment, a block list, a block, a trace
// or a trace entry: those are fresh dicts and lists for every item. A pickle that shares one would make the
// work of reading it, and of everything downstream that walks segments and blocks, grow with the square of its
// size (a segment list of 100,000 references to one segment of 100,000 blocks is a few hundred KiB), so it is
// refused.

/** Checks that each segment, block list, block, trace and trace entry is an object of its own. */
class OwnedObjects {
  readonly #seen = new WeakSet<object>();

  /** @throws InvalidArgumentError when `value` (an object) was claimed before; returns it otherwise */
  claim<T extends PickleValue | undefined>(path: string, value: T): T {
    if (typeof value !== 'object' || value === null) return value;
    if (this.#seen.has(value)) {
      throw new InvalidArgumentError(path, value, 'an object of its own: a PyTorch snapshot never refers twice to one segment, block or trace entry (a forged pickle?)');
    }
    this.#seen.add(value);
    return value;
  }
}

/**
 * Reads frame lists, once per list object: PyTorch's pickles share one frames list among many entries (the
 * memo), and reading each list once keeps the work linear in the pickle's size however often it is shared.
 */
class FrameReader {
  readonly #seen = new WeakMap<PickleValue[], SnapshotFrame[]>();

  read(path: string, value: PickleValue | undefined): SnapshotFrame[] {
    if (value === undefined) return [];
    const source = list(path, value);
    let frames = this.#seen.get(source);
    if (frames === undefined) {
      frames = source.map((f, i) => {
        const frame = dict(`${path}[${i}]`, f, 'a frame dict {name, filename, line}');
        return { name: str(`${path}[${i}].name`, frame.name), filename: str(`${path}[${i}].filename`, frame.filename), line: int(`${path}[${i}].line`, frame.line) };
      });
      this.#seen.set(source, frames);
    }
    return frames;
  }
}

/** Settings as JSON-like data: floats as numbers, tuples as arrays, big ints as strings of digits, bytes left out. */
function jsonSettings(value: PickleValue): unknown {
  if (value instanceof PickleFloat) return value.value;
  if (value instanceof PickleTuple) return value.items.map(jsonSettings);
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Uint8Array) return undefined;
  if (Array.isArray(value)) return value.map(jsonSettings);
  if (isPickleDict(value)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = jsonSettings(v);
    return out;
  }
  return value;
}

function dict(path: string, value: PickleValue | undefined, expectation: string): PickleDict {
  if (!isPickleDict(value)) throw new InvalidArgumentError(path, value, expectation);
  return value;
}

function list(path: string, value: PickleValue | undefined): PickleValue[] {
  if (!Array.isArray(value)) throw new InvalidArgumentError(path, value, 'a list');
  return value;
}

function count(path: string, value: PickleValue | undefined): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError(path, value, 'a non-negative safe integer');
  return value;
}

function int(path: string, value: PickleValue | undefined): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new InvalidArgumentError(path, value, 'a safe integer');
  return value;
}

function str(path: string, value: PickleValue | undefined): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(path, value, 'a str');
  return value;
}

function bool(path: string, value: PickleValue | undefined): boolean {
  if (typeof value !== 'boolean') throw new InvalidArgumentError(path, value, 'a bool');
  return value;
}

function oneOf<T extends string>(path: string, value: PickleValue | undefined, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) throw new InvalidArgumentError(path, value, `one of ${allowed.join(', ')}`);
  return value as T;
}

function poolId(path: string, value: PickleValue): [number, number] {
  const items = value instanceof PickleTuple ? value.items : Array.isArray(value) ? value : undefined;
  if (items?.length !== 2) throw new InvalidArgumentError(path, value, 'a tuple of two ints');
  return [int(`${path}[0]`, items[0]), int(`${path}[1]`, items[1])];
}
