import { expect } from 'chai';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Parser } from 'pickleparser';
import type { MemorySnapshot } from '@stowage/core';
import { CachingAllocator, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { findTraceRoot, readTrace, replayTrace } from '@stowage/lab/replay';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import type { PickleValue } from '@stowage/snapshot-pickle';
import { formatTraceLines, fromPytorchSnapshot, MalformedPickleError, PickleFloat, PickleTuple, readPickle, readSnapshotPickle, toTraceEvents, UnsafePickleError, writePickle, writeSnapshotPickle } from '@stowage/snapshot-pickle';
import { hasPython, runPython } from './canonical.js';

/**
 * For each snapshot pickle on standard input: its structure as PyTorch's viewer depends on it — the keys (in
 * order) and Python types of segments, blocks, trace entries, frames and settings, the pool id's item types,
 * the block states and trace actions.
 */
const STRUCTURE = `
import sys, pickle, json
def t(v): return type(v).__name__
def merge(acc, d):
    for k, v in d.items(): acc.setdefault(k, set()).add(t(v))
def done(acc): return [[k, sorted(v)] for k, v in acc.items()]
def structure(s):
    seg, blk, ent, frm, pool = {}, {}, {}, {}, set()
    for x in s['segments']:
        merge(seg, x)
        pool.add(tuple(t(i) for i in x['segment_pool_id']))
        for f in x['frames']: merge(frm, f)
        for b in x['blocks']:
            merge(blk, b)
            for f in b['frames']: merge(frm, f)
    for tr in s['device_traces']:
        for e in tr:
            merge(ent, {k: v for k, v in e.items() if k != 'device_free'})
            for f in e['frames']: merge(frm, f)
    return {
        'top': list(s), 'containers': [t(s['segments']), t(s['device_traces']), sorted({t(tr) for tr in s['device_traces']})],
        'segment': done(seg), 'block': done(blk), 'entry': done(ent), 'frame': done(frm), 'pool': sorted(pool),
        'settings': {k: t(v) for k, v in s['allocator_settings'].items()},
        'states': sorted({b['state'] for x in s['segments'] for b in x['blocks']}),
        'actions': sorted({e['action'] for tr in s['device_traces'] for e in tr}),
    }
out = []
while True:
    try: out.append(structure(pickle.load(sys.stdin.buffer)))
    except EOFError: break
print(json.dumps(out))
`;

/**
 * The opcodes that PyTorch's memory viewer (torch/utils/viz/MemoryViz.js, the page behind pytorch.org/memory_viz)
 * reads with its own unpickler; it throws on any other opcode and on a PROTO above 4.
 */
const VIEWER_OPCODES = [
  'PROTO', 'FRAME', 'STOP', 'MARK', 'NONE', 'NEWTRUE', 'NEWFALSE', 'BININT', 'BININT1', 'BININT2', 'LONG1', 'BINFLOAT',
  'SHORT_BINUNICODE', 'BINUNICODE', 'EMPTY_LIST', 'APPEND', 'APPENDS', 'LIST', 'EMPTY_DICT', 'SETITEM', 'SETITEMS', 'DICT',
  'EMPTY_TUPLE', 'TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'MEMOIZE', 'BINPUT', 'LONG_BINPUT', 'BINGET', 'LONG_BINGET',
];

/** The opcode names (pickletools.genops) and PROTO versions of the pickle on standard input. */
const OPCODES = `
import sys, json, pickletools
data = sys.stdin.buffer.read()
ops = list(pickletools.genops(data))
print(json.dumps([sorted({op.name for op, arg, pos in ops}), [arg for op, arg, pos in ops if op.name == 'PROTO']]))
`;

interface Structure {
  top: string[];
  containers: unknown[];
  segment: [string, string[]][];
  block: [string, string[]][];
  entry: [string, string[]][];
  frame: [string, string[]][];
  pool: string[][];
  settings: Record<string, string>;
  states: string[];
  actions: string[];
}

/** JSON-like data with tuples as arrays and floats as numbers, to compare with another reader's output. */
function plain(value: PickleValue): unknown {
  if (value instanceof PickleFloat) return value.value;
  if (value instanceof PickleTuple) return value.items.map(plain);
  if (Array.isArray(value)) return value.map(plain);
  if (typeof value === 'object' && value !== null && !(value instanceof Uint8Array)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  return value;
}

describe('PyTorch snapshot pickles', function () {
  const root = findTraceRoot();
  const name = root && readdirSync(join(root, 'examples')).find((f) => f.endsWith('.pickle'));
  let original: Uint8Array;

  before(function () {
    if (!root || !name) {
      console.log('    skipped: no example snapshot pickle under ../shared/traces/examples');
      this.skip();
    }
    original = readFileSync(join(root, 'examples', name));
  });

  describe('readSnapshotPickle', () => {
    it('reads the example that torch.cuda.memory._dump_snapshot wrote: segments whose blocks tile them, and the trace', () => {
      const snapshot = readSnapshotPickle(original);
      expect(snapshot.segments).to.have.length(216);
      expect(snapshot.device_traces).to.have.length(1);
      expect(snapshot.device_traces[0]).to.have.length(5163);
      for (const s of snapshot.segments) {
        expect(s.blocks.reduce((n, b) => n + b.size, 0)).to.equal(s.total_size);
        expect(s.blocks[0]!.address).to.equal(s.address);
        expect(s.segment_pool_id).to.deep.equal([0, 0]);
      }
      const entry = snapshot.device_traces[0]![0]!;
      expect(entry.action).to.equal('alloc');
      expect(entry.frames[0]).to.have.keys(['name', 'filename', 'line']);
      expect(snapshot.allocator_settings.garbage_collection_threshold).to.equal(0);
    });

    it('fills the keys older PyTorch releases leave out as PyTorch\'s viewer does', () => {
      const legacy = writePickle({
        segments: [
          {
            address: 4096,
            total_size: 3584,
            blocks: [
              { size: 1024, state: 'active_allocated' },
              { size: 2048, state: 'inactive' },
              { size: 512, state: 'active_allocated', history: [{ addr: 7168, real_size: 500, frames: [{ name: 'f', filename: 'a.py', line: 3 }] }] },
            ],
          },
        ],
        device_traces: [[{ action: 'alloc', addr: 4096, size: 1000 }, { action: 'workspace_snapshot', addr: 0, size: 0 }]],
      });
      const snapshot = readSnapshotPickle(legacy);
      const segment = snapshot.segments[0]!;
      expect(segment.blocks.map((b) => [b.address, b.requested_size, b.frames])).to.deep.equal([
        [4096, 1024, []],
        [5120, 2048, []],
        [7168, 500, [{ name: 'f', filename: 'a.py', line: 3 }]],
      ]);
      expect(segment).to.include({ device: 0, stream: 0, allocated_size: 1536, active_size: 1536, segment_type: 'large', is_expandable: false });
      expect(snapshot.device_traces[0]).to.deep.equal([{ action: 'alloc', addr: 4096, size: 1000, stream: 0, time_us: 0, frames: [], compile_context: 'N/A', user_metadata: '' }]);
    });

    it('gives a typed error for a file that is not a snapshot pickle: JSON lines, another pickle, a forged one', () => {
      expect(() => readSnapshotPickle(Buffer.from('{"seq":0,"action":"alloc"}\n'))).to.throw(MalformedPickleError, /byte 0x7b is not a pickle opcode/);
      expect(() => readSnapshotPickle(writePickle([1, 2]))).to.throw(InvalidArgumentError, /snapshot must be a PyTorch memory snapshot/);
      expect(() => readSnapshotPickle(writePickle({ segments: [{ address: -1 }] }))).to.throw(InvalidArgumentError, /snapshot\.segments\[0\]\.address must be a non-negative safe integer/);
      const forged = Buffer.concat([Buffer.from(writePickle({ segments: [] })).subarray(0, -1), Buffer.from('cos\nsystem\n.', 'latin1')]);
      expect(() => readSnapshotPickle(forged)).to.throw(UnsafePickleError, /os\.system/);
    });

    it('refuses at once a forged snapshot that refers to one segment many times', () => {
      const blocks = Array.from({ length: 20_000 }, () => ({ address: 0, size: 512, requested_size: 512, state: 'inactive', frames: [] }));
      const segment = { address: 0, total_size: 512 * 20_000, blocks };
      const forged = writePickle({ segments: Array.from({ length: 20_000 }, () => segment), device_traces: [] });
      expect(forged.length).to.be.lessThan(1_000_000);
      const start = performance.now();
      expect(() => readSnapshotPickle(forged)).to.throw(InvalidArgumentError, /snapshot\.segments\[1\] must be an object of its own/);
      expect(performance.now() - start).to.be.lessThan(5_000);
    });

    it('reads the example as pickleparser (another JavaScript reader) does', () => {
      expect(plain(readPickle(original))).to.deep.equal(new Parser().parse(original));
    });
  });

  describe('toTraceEvents', () => {
    it('links frees to allocations by address and adds the allocations live before recording as pre', () => {
      const events = toTraceEvents(readSnapshotPickle(original));
      const pre = events.filter((e) => e.pre);
      expect(events.slice(0, pre.length).every((e) => e.pre)).to.equal(true);
      expect(events.filter((e) => e.action === 'alloc' && !e.pre)).to.have.length(1721);
      const allocated = new Set(events.filter((e) => e.action === 'alloc').map((e) => e.id));
      for (const e of events) if (e.action !== 'alloc') expect(allocated.has(e.id), `free of id ${e.id}`).to.equal(true);
    });

    it('formats the trace as the JSON lines that readTrace reads back as the same events', async () => {
      const events = toTraceEvents(readSnapshotPickle(original));
      const dir = mkdtempSync(join(tmpdir(), 'snapshot-pickle-'));
      try {
        const path = join(dir, 'trace.jsonl');
        writeFileSync(path, formatTraceLines(events));
        expect(await readTrace(path)).to.deep.equal(events);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('replays through the caching engine to the peak of live bytes PyTorch recorded (12.968 GiB)', () => {
      const engine = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), { preset: 'pytorch' });
      const result = replayTrace(engine, toTraceEvents(readSnapshotPickle(original)));
      expect(result.failedAt).to.equal(undefined);
      expect(result.peakLiveBytes / 2 ** 30).to.be.closeTo(12.968, 0.0005);
    });
  });

  describe('writeSnapshotPickle', () => {
    it('writes back an imported snapshot as a pickle Python reads as equal to the original', function () {
      if (!hasPython()) {
        console.log('    skipped: python3 is not on PATH');
        this.skip();
      }
      const again = writeSnapshotPickle(readSnapshotPickle(original));
      const script = 'import sys, pickle\na = pickle.load(sys.stdin.buffer)\nb = pickle.load(sys.stdin.buffer)\nprint(a == b and repr(a) == repr(b))';
      expect(runPython(script, Buffer.concat([original, again])).trim()).to.equal('True');
    });

    it('exports a replayed engine\'s snapshot with the structure of the original: keys and types of segments, blocks, trace entries and frames', function () {
      if (!hasPython()) {
        console.log('    skipped: python3 is not on PATH');
        this.skip();
      }
      const engine = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), { preset: 'pytorch' });
      engine.recordHistory({ maxEntries: 100_000, stacks: true });
      const result = replayTrace(engine, toTraceEvents(readSnapshotPickle(original)), { keepLive: true });
      const snapshot = engine.snapshot();
      for (const ptr of result.live ?? []) engine.free(ptr);
      const [theirs, ours] = JSON.parse(runPython(STRUCTURE, Buffer.concat([original, writeSnapshotPickle(snapshot)]))) as [Structure, Structure];
      expect(ours.top).to.deep.equal(theirs.top);
      expect(ours.containers).to.deep.equal(theirs.containers);
      expect(ours.segment).to.deep.equal(theirs.segment);
      expect(ours.block).to.deep.equal(theirs.block);
      expect(ours.entry).to.deep.equal(theirs.entry);
      expect(ours.frame).to.deep.equal(theirs.frame);
      expect(ours.pool).to.deep.equal(theirs.pool);
      for (const key of Object.keys(theirs.settings)) if (key in ours.settings) expect(ours.settings[key], `allocator_settings.${key}`).to.equal(theirs.settings[key]);
      expect(ours.states).to.include.members(theirs.states);
      expect(ours.actions).to.include.members(theirs.actions);
    });

    it('uses only the opcodes PyTorch\'s memory viewer reads, in protocol 4', function () {
      if (!hasPython()) {
        console.log('    skipped: python3 is not on PATH');
        this.skip();
      }
      const engine = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), { preset: 'pytorch', memoryLimit: '64MiB' });
      engine.recordHistory({ stacks: true });
      const ptrs = [engine.allocate(100), engine.allocate(3 << 20), engine.allocate(30 << 20)];
      expect(() => engine.allocate(60 << 20)).to.throw(OutOfMemoryError);
      engine.free(ptrs[1]!);
      for (const snapshot of [engine.snapshot(), readSnapshotPickle(original)]) {
        const [ops, protocols] = JSON.parse(runPython(OPCODES, writeSnapshotPickle(snapshot))) as [string[], number[]];
        expect(VIEWER_OPCODES).to.include.members(ops);
        expect(protocols).to.deep.equal([4]);
      }
    });

    it('round-trips an engine snapshot through the pickle unchanged', () => {
      const engine = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), { preset: 'pytorch' });
      engine.recordHistory({ stacks: true });
      const a = engine.allocate(3 << 20);
      engine.allocate(1000);
      engine.free(a);
      const snapshot: MemorySnapshot = engine.snapshot();
      expect(fromPytorchSnapshot(readPickle(writeSnapshotPickle(snapshot)))).to.deep.equal(JSON.parse(JSON.stringify(snapshot)));
    });
  });
});
