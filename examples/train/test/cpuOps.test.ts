import { expect } from 'chai';
import type { Runtime, StorageImpl } from '@stowage/core';
import { createRuntime, InvalidArgumentError, TensorImpl } from '@stowage/core';
import type { Ops, PinScope, Tensor } from '@stowage/example-train';
import { createCpuOps } from '@stowage/example-train';
import type { Matrix } from './reference.js';
import {
  at,
  expectClose,
  layerNormRef,
  matmulRef,
  matrix,
  mseRef,
  numericGradient,
  randomValues,
  softmaxRef,
  transposed,
  weightedSum,
} from './reference.js';
import { allocatedBytes, rejectionOf } from './testSupport.js';

/** A seeded [rows, cols] matrix of float32 values in [-1, 1). */
function random(seed: number, rows: number, cols: number): Matrix {
  return matrix(rows, cols, randomValues(seed, rows * cols));
}

function upload(ops: Ops, x: Matrix): Promise<Tensor> {
  return ops.fromArray(x.rows, x.cols, Float32Array.from(x.values));
}

describe('createCpuOps', () => {
  it('round-trips values through fromArray and toArray', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const values = randomValues(1, 12);
    const x = await ops.fromArray(3, 4, values);
    expect(x.sizes).to.deep.equal([3, 4]);
    expect(x.dtype).to.equal('float32');
    expect(await ops.toArray(x)).to.deep.equal(values);
    expect(ops.device).to.equal('cpu');
  });

  it('multiplies like the naive product, for every combination of transposes', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const a = random(1, 5, 7);
    const b = random(2, 7, 3);
    const expected = matmulRef(a, b).values;
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const y = await ops.matmul(await upload(ops, transA ? transposed(a) : a), await upload(ops, transB ? transposed(b) : b), transA, transB);
        expect(y.sizes, `transA ${transA}, transB ${transB}`).to.deep.equal([5, 3]);
        expectClose(await ops.toArray(y), expected);
      }
    }
  });

  it('adds a bias to every row, adds elementwise and scales', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = random(1, 4, 3);
    const bias = random(2, 1, 3);
    const other = random(3, 4, 3);
    const [tx, tb, to] = [await upload(ops, x), await upload(ops, bias), await upload(ops, other)];
    expectClose(await ops.toArray(await ops.addBias(tx, tb)), x.values.map((v, i) => v + bias.values[i % 3]!));
    expectClose(await ops.toArray(await ops.add(tx, to)), x.values.map((v, i) => v + other.values[i]!));
    expectClose(await ops.toArray(await ops.scale(tx, -0.5)), x.values.map((v) => v * -0.5));
  });

  it('sums over rows into one row', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = random(1, 6, 4);
    const y = await ops.sumRows(await upload(ops, x));
    expect(y.sizes).to.deep.equal([1, 4]);
    expectClose(await ops.toArray(y), [0, 1, 2, 3].map((j) => [0, 1, 2, 3, 4, 5].reduce((s, i) => s + at(x, i, j), 0)));
  });

  it('applies relu, and passes a gradient only where the input was positive', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = matrix(1, 4, [-1, 0, 0.5, 2]);
    const tx = await upload(ops, x);
    expect([...(await ops.toArray(await ops.relu(tx)))]).to.deep.equal([0, 0, 0.5, 2]);
    const dy = await ops.fromArray(1, 4, new Float32Array([1, 2, 3, 4]));
    expect([...(await ops.toArray(await ops.reluBackward(dy, tx)))]).to.deep.equal([0, 0, 3, 4]);
  });

  it('computes a row-wise softmax whose rows sum to one', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = matrix(3, 5, randomValues(1, 15).map((v) => 4 * v));
    const y = await ops.toArray(await ops.softmax(await upload(ops, x)));
    expectClose(y, softmaxRef(x, false).values, 1e-7, 1e-6);
    for (let i = 0; i < 3; i++) expect(y.slice(5 * i, 5 * i + 5).reduce((s, v) => s + v, 0)).to.be.closeTo(1, 1e-6);
  });

  it('gives exactly zero above the diagonal in a causal softmax', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = random(1, 4, 4);
    const y = await ops.toArray(await ops.softmax(await upload(ops, x), true));
    expectClose(y, softmaxRef(x, true).values, 1e-7, 1e-6);
    for (let i = 0; i < 4; i++) for (let j = i + 1; j < 4; j++) expect(y[i * 4 + j]).to.equal(0);
    expect(y[0]).to.equal(1);
  });

  it('refuses a causal softmax of a matrix that is not square', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const error = await rejectionOf(ops.softmax(await upload(ops, random(1, 2, 3)), true));
    expect(error).to.be.instanceOf(InvalidArgumentError);
  });

  it('normalizes each row and returns its mean and reciprocal standard deviation', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = matrix(3, 8, randomValues(1, 24).map((v) => 3 * v + 1));
    const gamma = random(2, 1, 8);
    const beta = random(3, 1, 8);
    const { y, mean, rstd } = await ops.layerNorm(await upload(ops, x), await upload(ops, gamma), await upload(ops, beta), 1e-5);
    const expected = layerNormRef(x, gamma, beta, 1e-5);
    expect(mean.sizes).to.deep.equal([3, 1]);
    expect(rstd.sizes).to.deep.equal([3, 1]);
    expectClose(await ops.toArray(y), expected.y.values);
    expectClose(await ops.toArray(mean), expected.mean);
    expectClose(await ops.toArray(rstd), expected.rstd);
  });

  it('computes the mean squared error and its gradient', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const pred = random(1, 3, 4);
    const target = random(2, 3, 4);
    const { loss, grad } = await ops.mseLoss(await upload(ops, pred), await upload(ops, target));
    expect(loss.sizes).to.deep.equal([1, 1]);
    expectClose(await ops.toArray(loss), [mseRef(pred, target)]);
    expectClose(await ops.toArray(grad), pred.values.map((p, i) => (2 * (p - target.values[i]!)) / 12));
  });

  it('subtracts lr times the gradient from the parameter, in its own storage', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const param = await ops.fromArray(1, 3, new Float32Array([1, 2, 3]));
    const storage = param.storage;
    await ops.sgdStep(param, await ops.fromArray(1, 3, new Float32Array([1, -1, 0.5])), 0.5);
    expect(param.storage).to.equal(storage);
    expect([...(await ops.toArray(param))]).to.deep.equal([0.5, 2.5, 2.75]);
  });

  it('gives the same bits for the same inputs', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const a = await upload(ops, random(1, 33, 45));
    const b = await upload(ops, random(2, 45, 17));
    const first = await ops.toArray(await ops.matmul(a, b));
    const second = await ops.toArray(await ops.matmul(a, b));
    expect(new Uint32Array(second.buffer)).to.deep.equal(new Uint32Array(first.buffer));
  });

  it('rejects mismatched shapes with an InvalidArgumentError and allocates nothing', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const a = await upload(ops, random(1, 2, 3));
    const b = await upload(ops, random(2, 2, 3));
    const c = await upload(ops, random(3, 3, 2));
    const before = allocatedBytes(rt);
    for (const attempt of [ops.matmul(a, b), ops.add(a, c), ops.addBias(a, b), ops.sgdStep(a, c, 0.1), ops.fromArray(2, 2, new Float32Array(3))]) {
      expect(await rejectionOf(attempt)).to.be.instanceOf(InvalidArgumentError);
    }
    expect(allocatedBytes(rt)).to.equal(before);
  });

  it('rejects a tensor that is not a contiguous float32 matrix', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    for (const x of [rt.tensor([4]), rt.tensor([2, 2], { dtype: 'float64' }), rt.tensor([2, 3]).asStrided([3, 2], [1, 3])]) {
      expect(await rejectionOf(ops.relu(x))).to.be.instanceOf(InvalidArgumentError);
    }
  });
});

describe('createCpuOps (pinning)', () => {
  /** A PinScope that logs each pin and unpin with the names of the items, and the allocator's allocations. */
  function recordingPin(rt: Runtime, names: Map<object, string>, log: string[], asynchronous = false): PinScope {
    rt.allocator('cpu').events.on('allocated', () => log.push('allocate'));
    const nameOf = (item: StorageImpl | TensorImpl): string => names.get(item) ?? 'output';
    return (...items) => {
      const label = items.map(nameOf).join(',');
      log.push(`pin ${label}`);
      const guard = { [Symbol.dispose]: () => log.push(`unpin ${label}`) };
      return asynchronous ? Promise.resolve(guard) : guard;
    };
  }

  for (const asynchronous of [false, true]) {
    it(`pins the inputs before allocating the outputs, and the outputs before writing them (${asynchronous ? 'an awaited' : 'a synchronous'} guard)`, async () => {
      await using rt = await createRuntime();
      const setup = createCpuOps(rt);
      const a = await upload(setup, random(1, 2, 3));
      const b = await upload(setup, random(2, 3, 2));
      const log: string[] = [];
      const pin = recordingPin(rt, new Map([[a, 'a'], [b, 'b']]), log, asynchronous);
      const ops = createCpuOps(rt, { pin, afterOp: () => log.push('afterOp') });
      const y = await ops.matmul(a, b);
      expect(log).to.deep.equal(['pin a,b', 'allocate', 'pin output', 'unpin output', 'unpin a,b', 'afterOp']);
      expect(y).to.be.instanceOf(TensorImpl);
    });
  }

  it('pins the parameter and the gradient of an SGD step, and allocates nothing', async () => {
    await using rt = await createRuntime();
    const setup = createCpuOps(rt);
    const param = await upload(setup, random(1, 2, 2));
    const grad = await upload(setup, random(2, 2, 2));
    const log: string[] = [];
    const ops = createCpuOps(rt, { pin: recordingPin(rt, new Map([[param, 'param'], [grad, 'grad']]), log) });
    await ops.sgdStep(param, grad, 0.1);
    expect(log).to.deep.equal(['pin param,grad', 'unpin param,grad']);
  });

  it('releases the outputs and unpins the inputs when pinning the outputs fails', async () => {
    await using rt = await createRuntime();
    const setup = createCpuOps(rt);
    const x = await upload(setup, random(1, 3, 8));
    const gamma = await upload(setup, random(2, 1, 8));
    const beta = await upload(setup, random(3, 1, 8));
    const before = allocatedBytes(rt);
    const log: string[] = [];
    const failure = new Error('device lost');
    const ops = createCpuOps(rt, {
      pin: (...items) => {
        if (items[0] === x) {
          log.push('pin x');
          return { [Symbol.dispose]: () => log.push('unpin x') };
        }
        throw failure;
      },
    });
    expect(await rejectionOf(ops.layerNorm(x, gamma, beta, 1e-5))).to.equal(failure);
    expect(log).to.deep.equal(['pin x', 'unpin x']);
    expect(allocatedBytes(rt)).to.equal(before);
  });

  it('releases its outputs when afterOp throws', async () => {
    await using rt = await createRuntime();
    const setup = createCpuOps(rt);
    const x = await upload(setup, random(1, 4, 4));
    const before = allocatedBytes(rt);
    const failure = new Error('probe failed');
    const ops = createCpuOps(rt, {
      afterOp: () => {
        throw failure;
      },
    });
    expect(await rejectionOf(ops.relu(x))).to.equal(failure);
    expect(allocatedBytes(rt)).to.equal(before);
  });
});

describe('createCpuOps (backward ops against central differences)', () => {
  // Each checks the op's float32 gradient of L = Σ w ⊙ f(inputs) against float64 central differences of f's
  // naive reference.

  it('gives the gradients of a product as products with a transposed operand', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const [a, b, w] = [random(1, 4, 5), random(2, 5, 3), random(3, 4, 3)];
    const [ta, tb, tw] = [await upload(ops, a), await upload(ops, b), await upload(ops, w)];
    expectClose(await ops.toArray(await ops.matmul(tw, tb, false, true)), numericGradient(a, (x) => weightedSum(matmulRef(x, b), w)));
    expectClose(await ops.toArray(await ops.matmul(ta, tw, true, false)), numericGradient(b, (x) => weightedSum(matmulRef(a, x), w)));
  });

  it('gives the bias gradient of addBias as sumRows', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const [x, bias, w] = [random(1, 5, 3), random(2, 1, 3), random(3, 5, 3)];
    const addBias = (b: Matrix): Matrix => ({ ...x, values: x.values.map((v, i) => v + b.values[i % 3]!) });
    expectClose(await ops.toArray(await ops.sumRows(await upload(ops, w))), numericGradient(bias, (b) => weightedSum(addBias(b), w)));
  });

  it('passes the gradient of relu where the input is positive', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const x = matrix(3, 4, randomValues(1, 12).map((v) => v + Math.sign(v) * 0.1)); // away from the kink
    const w = random(2, 3, 4);
    const relu = (m: Matrix): Matrix => ({ ...m, values: m.values.map((v) => Math.max(v, 0)) });
    const dx = await ops.reluBackward(await upload(ops, w), await upload(ops, x));
    expectClose(await ops.toArray(dx), numericGradient(x, (m) => weightedSum(relu(m), w)));
  });

  for (const causal of [false, true]) {
    it(`gives the gradient of a${causal ? ' causal' : ''} softmax from its output`, async () => {
      await using rt = await createRuntime();
      const ops = createCpuOps(rt);
      const x = matrix(5, 5, randomValues(1, 25).map((v) => 3 * v));
      const w = random(2, 5, 5);
      const y = await ops.softmax(await upload(ops, x), causal);
      const dx = await ops.softmaxBackward(await upload(ops, w), y);
      expectClose(await ops.toArray(dx), numericGradient(x, (m) => weightedSum(softmaxRef(m, causal), w)));
    });
  }

  it('gives the gradients of a layer norm with respect to its input, gain and shift', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const eps = 1e-5;
    const [x, gamma, beta, w] = [matrix(4, 6, randomValues(1, 24).map((v) => 2 * v + 0.5)), random(2, 1, 6), random(3, 1, 6), random(4, 4, 6)];
    const tx = await upload(ops, x);
    const tgamma = await upload(ops, gamma);
    const { mean, rstd } = await ops.layerNorm(tx, tgamma, await upload(ops, beta), eps);
    const { dx, dgamma, dbeta } = await ops.layerNormBackward(await upload(ops, w), tx, mean, rstd, tgamma);
    const loss = (m: Matrix, g: Matrix, b: Matrix): number => weightedSum(layerNormRef(m, g, b, eps).y, w);
    expectClose(await ops.toArray(dx), numericGradient(x, (m) => loss(m, gamma, beta)), 1e-4);
    expectClose(await ops.toArray(dgamma), numericGradient(gamma, (g) => loss(x, g, beta)), 1e-4);
    expectClose(await ops.toArray(dbeta), numericGradient(beta, (b) => loss(x, gamma, b)), 1e-4);
  });

  it('gives the gradient of the mean squared error with respect to the prediction', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    const [pred, target] = [random(1, 3, 5), random(2, 3, 5)];
    const { grad } = await ops.mseLoss(await upload(ops, pred), await upload(ops, target));
    expectClose(await ops.toArray(grad), numericGradient(pred, (p) => mseRef(p, target)));
  });
});
