import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import type { IterationTrace, ModelTrace, TraceName, TraceOp } from '@stowage/example-train';
import {
  DEFAULT_TRANSFORMER_VARYING_TRACE_SHAPES,
  maxOpWorkingSet,
  mlpTrace,
  optimizerTrace,
  peakLiveBytes,
  toOfflineTrace,
  TRACES,
  transformerTrace,
  transformerVaryingTrace,
  unetTrace,
} from '@stowage/example-train';
import { beladyMin } from '@stowage/lab';

const MiB = 2 ** 20;

/**
 * Checks the rules of Trace.ts over iterations 0 … iterations − 1, and that each op's `bytesAccessed` is the bytes
 * of the distinct tensors it reads, creates and updates. Throws an assertion error naming the first broken rule.
 */
function expectTraceRules(trace: ModelTrace, iterations: number): void {
  const persistentIds = new Set(trace.persistent.map((t) => t.id));
  expect(persistentIds.size, 'persistent ids are unique').to.equal(trace.persistent.length);
  for (let i = 0; i < iterations; i++) {
    const iteration = trace.iteration(i);
    const where = (op: TraceOp) => `${trace.name}, iteration ${i}, op ${op.name}`;
    const bytes = new Map([...trace.persistent, ...iteration.tensors].map((t) => [t.id, t.bytes]));
    expect(bytes.size, 'ids are unique within an iteration, persistent ones included').to.equal(trace.persistent.length + iteration.tensors.length);
    for (const b of bytes.values()) expect(Number.isSafeInteger(b) && b > 0, 'sizes are positive whole bytes').to.equal(true);

    const created = new Set<number>();
    const freed = new Set<number>();
    for (const op of iteration.ops) {
      const used = [...op.reads, ...op.updates];
      for (const t of [...used, ...op.creates, ...op.frees]) expect(bytes.has(t), `${where(op)} names tensor ${t}, which is not in the trace`).to.equal(true);
      for (const t of op.creates) {
        expect(persistentIds.has(t), `${where(op)} creates persistent tensor ${t}`).to.equal(false);
        expect(created.has(t), `${where(op)} creates tensor ${t} a second time`).to.equal(false);
        expect(used, `${where(op)} uses tensor ${t} as it creates it`).not.to.include(t);
        created.add(t);
      }
      for (const t of used) {
        expect(persistentIds.has(t) || created.has(t), `${where(op)} uses tensor ${t} before it is created`).to.equal(true);
        expect(freed.has(t), `${where(op)} uses tensor ${t} after it is freed`).to.equal(false);
      }
      for (const t of op.frees) {
        expect(persistentIds.has(t), `${where(op)} frees persistent tensor ${t}`).to.equal(false);
        expect(created.has(t) && !freed.has(t), `${where(op)} frees tensor ${t}, which is not live`).to.equal(true);
        freed.add(t);
      }
      expect(new Set(op.reads).size + new Set(op.updates).size, `${where(op)} both reads and updates a tensor`).to.equal(new Set(used).size);
      expect(op.flops, where(op)).to.be.at.least(0);
      expect(op.bytesAccessed, where(op)).to.equal(sumBytes(new Set([...used, ...op.creates]), bytes));
    }
    const own = iteration.tensors.map((t) => t.id);
    expect([...created].sort(), `${trace.name}, iteration ${i}: every iteration tensor is created`).to.deep.equal([...own].sort());
    expect([...freed].sort(), `${trace.name}, iteration ${i}: every iteration tensor is freed`).to.deep.equal([...own].sort());
  }
}

function sumBytes(ids: Iterable<number>, bytes: ReadonlyMap<number, number>): number {
  let sum = 0;
  for (const t of ids) sum += bytes.get(t)!;
  return sum;
}

function tensorNamed(trace: ModelTrace, iteration: IterationTrace, name: string): number {
  const t = [...trace.persistent, ...iteration.tensors].find((tensor) => tensor.name === name);
  if (t === undefined) throw new Error(`no tensor named ${name}`);
  return t.id;
}

function opNamed(iteration: IterationTrace, name: string): TraceOp {
  const op = iteration.ops.find((o) => o.name === name);
  if (op === undefined) throw new Error(`no op named ${name}`);
  return op;
}

/** The index of the op that frees t, and of the last op that reads or updates it. */
function freeAndLastUse(iteration: IterationTrace, t: number): { freedAt: number; lastUse: number } {
  const freedAt = iteration.ops.findIndex((op) => op.frees.includes(t));
  let lastUse = -1;
  iteration.ops.forEach((op, i) => {
    if (op.reads.includes(t) || op.updates.includes(t)) lastUse = i;
  });
  return { freedAt, lastUse };
}

/**
 * Persistent p (8 bytes); per iteration a (100 bytes), b (50), c (30):
 * `make a` creates a; `a to b` reads a, p, creates b, frees a; `b to c` reads b, creates c, updates p, frees b, c.
 */
function tinyTrace(): ModelTrace {
  const iteration: IterationTrace = {
    tensors: [
      { id: 1, bytes: 100, name: 'a' },
      { id: 2, bytes: 50, name: 'b' },
      { id: 3, bytes: 30, name: 'c' },
    ],
    ops: [
      { name: 'make a', reads: [], creates: [1], updates: [], frees: [], flops: 0, bytesAccessed: 100 },
      { name: 'a to b', reads: [1, 0], creates: [2], updates: [], frees: [1], flops: 50, bytesAccessed: 158 },
      { name: 'b to c', reads: [2], creates: [3], updates: [0], frees: [2, 3], flops: 30, bytesAccessed: 88 },
    ],
  };
  return { name: 'tiny', shapes: {}, persistent: [{ id: 0, bytes: 8, name: 'p' }], iteration: () => iteration };
}

describe('TRACES', () => {
  const names = Object.keys(TRACES) as TraceName[];

  it('names each trace after the ModelTrace it generates', () => {
    expect(names).to.deep.equal(['mlp', 'transformer', 'unet', 'transformer-varying', 'optimizer']);
    for (const name of names) expect(TRACES[name]().name).to.equal(name);
  });

  for (const name of names) {
    it(`${name}: keeps the rules of Trace.ts over several iterations`, () => {
      expectTraceRules(TRACES[name](), 5);
    });
  }

  for (const name of names) {
    const opFraction = name === 'mlp' || name === 'transformer' || name === 'unet' ? 8 : 4;
    it(`${name}: peaks between 32 and 256 MiB, and no op needs more than 1/${opFraction} of the peak`, () => {
      const trace = TRACES[name]();
      const iterations = name === 'transformer-varying' ? DEFAULT_TRANSFORMER_VARYING_TRACE_SHAPES.sequences.length : 2;
      const peak = peakLiveBytes(trace, iterations);
      const workingSet = Math.max(...Array.from({ length: iterations }, (_, i) => maxOpWorkingSet(trace, i)));
      expect(peak).to.be.within(32 * MiB, 256 * MiB);
      expect(workingSet / peak).to.be.at.most(1 / opFraction);
    });
  }

  for (const name of names) {
    it(`${name}: converts to an offline trace that Belady-MIN runs at a quarter of the peak`, () => {
      const trace = TRACES[name]();
      const result = beladyMin(toOfflineTrace(trace, 2), Math.floor(peakLiveBytes(trace, 2) / 4));
      expect(result.fits).to.equal(true);
      expect(result.bytesMoved).to.be.greaterThan(0);
    });
  }
});

describe('mlpTrace', () => {
  const shapes = { batch: 4, inputs: 3, hidden: 5, outputs: 2, layers: 3, bytesPerElement: 2 };

  it('gives the first linear layer batch·inputs·2 input bytes and 2·batch·inputs·hidden flops', () => {
    const trace = mlpTrace(shapes);
    const iteration = trace.iteration(0);
    const fc1 = opNamed(iteration, 'fc1');
    const input = tensorNamed(trace, iteration, 'input');
    expect(fc1.reads).to.deep.equal([input, tensorNamed(trace, iteration, 'fc1.weight')]);
    expect(iteration.tensors.find((t) => t.id === input)!.bytes).to.equal(4 * 3 * 2);
    expect(fc1.flops).to.equal(2 * 4 * 3 * 5);
    expect(fc1.bytesAccessed).to.equal((4 * 3 + 3 * 5 + 4 * 5) * 2);
  });

  it('has one op to load, 2·layers − 1 forward, one loss, 3·layers − 2 backward and one SGD op per layer', () => {
    expect(mlpTrace(shapes).iteration(0).ops.length).to.equal(6 * shapes.layers - 1);
  });

  it('frees every activation after its last backward read', () => {
    const trace = mlpTrace(shapes);
    const iteration = trace.iteration(0);
    for (const layer of [1, 2]) {
      const activation = tensorNamed(trace, iteration, `relu${layer}.out`);
      const { freedAt, lastUse } = freeAndLastUse(iteration, activation);
      expect(freedAt).to.equal(lastUse);
      expect(iteration.ops[freedAt]!.name).to.equal(`relu${layer}.backward`);
    }
  });

  it('creates each weight gradient in backward and frees it in its SGD op', () => {
    const trace = mlpTrace(shapes);
    const iteration = trace.iteration(0);
    for (const layer of [1, 2, 3]) {
      const gradient = tensorNamed(trace, iteration, `grad.fc${layer}.weight`);
      expect(iteration.ops.find((op) => op.creates.includes(gradient))!.name).to.equal(`fc${layer}.backward.weight`);
      expect(iteration.ops.find((op) => op.frees.includes(gradient))!.name).to.equal(`sgd fc${layer}.weight`);
    }
  });

  it('refuses a shape it does not have, or one that is not a positive integer', () => {
    expect(() => mlpTrace({ layers: 0 })).to.throw(InvalidArgumentError);
    expect(() => mlpTrace({ batch: 1.5 })).to.throw(InvalidArgumentError);
    expect(() => mlpTrace({ width: 8 } as never)).to.throw(InvalidArgumentError);
  });
});

describe('transformerTrace', () => {
  const shapes = { batch: 1, sequence: 4, model: 8, heads: 2, hidden: 16, blocks: 2, bytesPerElement: 2 };

  it('reads the QKV tensor twice in forward: for the scores and for × V', () => {
    const trace = transformerTrace(shapes);
    const iteration = trace.iteration(0);
    const qkv = tensorNamed(trace, iteration, 'block1.qkv.out');
    const forwardReaders = iteration.ops.filter((op) => op.reads.includes(qkv) && !op.name.includes('backward')).map((op) => op.name);
    expect(forwardReaders).to.deep.equal(['block1.scores', 'block1.values']);
  });

  it('gives the scores batch·heads·sequence² elements and 2·batch·sequence²·model flops', () => {
    const trace = transformerTrace(shapes);
    const iteration = trace.iteration(0);
    const scores = opNamed(iteration, 'block1.scores');
    expect(scores.flops).to.equal(2 * 4 * 4 * 8);
    expect(scores.bytesAccessed).to.equal((4 * 3 * 8 + 2 * 4 * 4) * 2);
  });

  it('runs backward in reverse, block 2 before block 1, reading the saved activations', () => {
    const trace = transformerTrace(shapes);
    const iteration = trace.iteration(0);
    const names = iteration.ops.map((op) => op.name);
    expect(names.indexOf('block2.norm1.backward')).to.be.lessThan(names.indexOf('block1.down.backward.input'));
    const probabilities = tensorNamed(trace, iteration, 'block1.softmax.out');
    const { freedAt, lastUse } = freeAndLastUse(iteration, probabilities);
    expect(iteration.ops[freedAt]!.name).to.equal('block1.softmax.backward');
    expect(freedAt).to.equal(lastUse);
  });
});

describe('transformerVaryingTrace', () => {
  const sequences = [8, 4, 12];
  const shapes = { batch: 1, sequences, model: 8, heads: 2, hidden: 16, blocks: 1, bytesPerElement: 2 };

  it('runs iteration i at sequences[i % sequences.length], with the same weights', () => {
    const trace = transformerVaryingTrace(shapes);
    for (let i = 0; i < 7; i++) {
      const iteration = trace.iteration(i);
      const scores = iteration.tensors.find((t) => t.name === 'block1.scores.out')!;
      const sequence = sequences[i % sequences.length]!;
      expect(scores.bytes).to.equal(2 * sequence * sequence * 2);
      for (const t of trace.persistent) expect(iteration.tensors.map((it) => it.id)).not.to.include(t.id);
    }
    expect(trace.iteration(4)).to.deep.equal(trace.iteration(1));
  });

  it('refuses an empty list of sequence lengths', () => {
    expect(() => transformerVaryingTrace({ sequences: [] })).to.throw(InvalidArgumentError);
    expect(() => transformerVaryingTrace({ sequences: [8, 0] })).to.throw(InvalidArgumentError);
  });
});

describe('unetTrace', () => {
  const shapes = { batch: 1, inChannels: 3, outChannels: 3, size: 8, channels: 4, levels: 3, convsPerLevel: 2, bytesPerElement: 2 };

  it('keeps each skip from its encoder level until its decoder level concatenates it', () => {
    const trace = unetTrace(shapes);
    const iteration = trace.iteration(0);
    const names = iteration.ops.map((op) => op.name);
    for (const level of [0, 1]) {
      const skip = tensorNamed(trace, iteration, `down${level}.relu2.out`);
      const createdAt = iteration.ops.findIndex((op) => op.creates.includes(skip));
      expect(createdAt).to.be.lessThan(names.indexOf('bottom.conv1'));
      expect(opNamed(iteration, `up${level}.concat`).reads).to.include(skip);
      expect(freeAndLastUse(iteration, skip).freedAt).to.be.greaterThan(names.indexOf('loss'));
    }
  });

  it('accumulates a skip gradient: the concat backward creates it, the pooling backward updates it', () => {
    const trace = unetTrace(shapes);
    const iteration = trace.iteration(0);
    const gradient = tensorNamed(trace, iteration, 'grad.down0.relu2.out');
    expect(opNamed(iteration, 'up0.concat.backward').creates).to.include(gradient);
    expect(opNamed(iteration, 'down0.pool.backward').updates).to.include(gradient);
  });

  it('gives a 3×3 convolution 2·batch·size²·in·out·9 flops', () => {
    const iteration = unetTrace(shapes).iteration(0);
    const conv = opNamed(iteration, 'down0.conv1');
    expect(conv.flops).to.equal(2 * 8 * 8 * 3 * 4 * 9);
    expect(conv.bytesAccessed).to.equal((3 * 8 * 8 + 9 * 3 * 4 + 4 * 8 * 8) * 2);
  });

  it('refuses a size that does not halve evenly at every level', () => {
    expect(() => unetTrace({ ...shapes, size: 6 })).to.throw(InvalidArgumentError);
  });
});

describe('optimizerTrace', () => {
  const shapes = { batch: 4, inputs: 3, hidden: 5, outputs: 2, layers: 3, bytesPerElement: 2 };

  it('keeps each weight with its Adam m and v, and touches m and v only in the last ops of the iteration', () => {
    const trace = optimizerTrace(shapes);
    const iteration = trace.iteration(0);
    expect(trace.persistent.map((t) => t.name)).to.have.members([1, 2, 3].flatMap((l) => [`fc${l}.weight`, `adam.m.fc${l}.weight`, `adam.v.fc${l}.weight`]));
    const adam = iteration.ops.slice(-3);
    expect(adam.map((op) => op.name)).to.deep.equal(['adam fc1.weight', 'adam fc2.weight', 'adam fc3.weight']);
    const state = trace.persistent.filter((t) => t.name.startsWith('adam.')).map((t) => t.id);
    for (const op of iteration.ops.slice(0, -3)) for (const t of state) expect([...op.reads, ...op.updates]).not.to.include(t);
  });

  it('updates weight, m and v in place from the gradient, which it frees', () => {
    const trace = optimizerTrace(shapes);
    const iteration = trace.iteration(0);
    const op = opNamed(iteration, 'adam fc1.weight');
    const id = (name: string) => tensorNamed(trace, iteration, name);
    expect(op.reads).to.deep.equal([id('grad.fc1.weight')]);
    expect(op.updates).to.deep.equal([id('fc1.weight'), id('adam.m.fc1.weight'), id('adam.v.fc1.weight')]);
    expect(op.frees).to.deep.equal([id('grad.fc1.weight')]);
    expect(op.bytesAccessed).to.equal(4 * 3 * 5 * 2);
    expect(op.flops).to.equal(12 * 3 * 5);
  });
});

describe('peakLiveBytes', () => {
  it("counts the persistent bytes and an op's creates before its frees", () => {
    expect(peakLiveBytes(tinyTrace(), 1)).to.equal(8 + 100 + 50);
    expect(peakLiveBytes(tinyTrace(), 3)).to.equal(8 + 100 + 50);
  });

  it('refuses a count of iterations that is not a positive integer', () => {
    expect(() => peakLiveBytes(tinyTrace(), 0)).to.throw(InvalidArgumentError);
  });
});

describe('maxOpWorkingSet', () => {
  it('is the largest sum of the bytes one op reads, creates and updates', () => {
    expect(maxOpWorkingSet(tinyTrace(), 0)).to.equal(100 + 8 + 50);
  });
});

describe('toOfflineTrace', () => {
  it('keeps persistent ids, names iteration tensors by iteration, and carries pins, creates, writes and frees', () => {
    const offline = toOfflineTrace(tinyTrace(), 2);
    expect(offline.tensors).to.deep.equal([
      { id: 0, bytes: 8 },
      { id: '0:1', bytes: 100 },
      { id: '0:2', bytes: 50 },
      { id: '0:3', bytes: 30 },
      { id: '1:1', bytes: 100 },
      { id: '1:2', bytes: 50 },
      { id: '1:3', bytes: 30 },
    ]);
    const opsOf = (i: number) => [
      { pins: [`${i}:1`], creates: [`${i}:1`], writes: [], frees: [] },
      { pins: [`${i}:1`, 0, `${i}:2`], creates: [`${i}:2`], writes: [], frees: [`${i}:1`] },
      { pins: [`${i}:2`, `${i}:3`, 0], creates: [`${i}:3`], writes: [0], frees: [`${i}:2`, `${i}:3`] },
    ];
    expect(offline.ops).to.deep.equal([...opsOf(0), ...opsOf(1)]);
  });

  it('gives Belady-MIN a trace it replays: persistent p starts on the host and is paged in once', () => {
    const result = beladyMin(toOfflineTrace(tinyTrace(), 2), 158);
    expect(result.fits).to.equal(true);
    expect(result.pageInBytes).to.equal(8);
    expect(result.pageOutBytes).to.equal(0);
    expect(beladyMin(toOfflineTrace(tinyTrace(), 2), 157).fits).to.equal(false);
  });
});
