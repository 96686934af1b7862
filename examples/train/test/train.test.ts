import { expect } from 'chai';
import { createRuntime, InvalidArgumentError } from '@stowage/core';
import type { MlpSizes, Model, ModelName, ModelOptions, Ops } from '@stowage/example-train';
import { createCpuOps, createModel, DEFAULT_TRANSFORMER_SIZES, MODEL_NAMES, train } from '@stowage/example-train';
import { randomValues } from './reference.js';
import { allocatedBytes, rejectionOf } from './testSupport.js';

const SMALL: Record<ModelName, ModelOptions> = {
  mlp: { model: 'mlp', sizes: { batch: 8, inputs: 6, hidden: 10, outputs: 3 } },
  transformer: { model: 'transformer', sizes: { sequence: 6, model: 8, hidden: 12, outputs: 4 } },
};

/** Small models of depth 2: two hidden layers, two blocks (the input gradient flows from one into the other). */
const SMALL_DEEP: Record<ModelName, ModelOptions> = {
  mlp: { model: 'mlp', sizes: { ...SMALL.mlp.sizes, layers: 2 } },
  transformer: { model: 'transformer', sizes: { ...SMALL.transformer.sizes, blocks: 2 } },
};

/** The model's loss with its parameters as they are now (the gradients are dropped). */
async function lossOf(model: Model): Promise<number> {
  const { loss, gradients } = await model.lossAndGradients();
  for (const gradient of gradients) gradient.storage.release();
  return loss;
}

/** Each parameter's gradient against central differences of the model's loss along a random direction. */
async function checkGradients(options: ModelOptions): Promise<void> {
  await using rt = await createRuntime();
  const ops = createCpuOps(rt);
  using model = await createModel(ops, options);
  const { loss, gradients } = await model.lossAndGradients();
  expect(loss).to.be.greaterThan(0);
  expect(gradients.map((g) => g.sizes)).to.deep.equal(model.parameters.map((p) => p.tensor.sizes));
  for (const [index, { name: parameter, tensor }] of model.parameters.entries()) {
    // Move along a random direction in this parameter alone; the float32 rounding of the moved values is
    // accounted for by using the step actually taken. A step of 1e-3 stays above float32 noise, but in a deeper
    // model it may carry a ReLU input across zero, where the loss has a kink: a wrong gradient is off at every
    // step, a crossed kink only at the larger ones, so a quarter of the step is tried before failing.
    const gradient = await ops.toArray(gradients[index]!);
    gradients[index]!.storage.release();
    const original = await ops.toArray(tensor);
    const direction = randomValues(index + 1, original.length);
    const misses: string[] = [];
    for (const eps of [1e-3, 2.5e-4]) {
      const plus = original.map((v, i) => v + eps * direction[i]!);
      const minus = original.map((v, i) => v - eps * direction[i]!);
      rt.write(tensor.storage, plus);
      const lossPlus = await lossOf(model);
      rt.write(tensor.storage, minus);
      const lossMinus = await lossOf(model);
      rt.write(tensor.storage, original);
      const predicted = gradient.reduce((sum, g, i) => sum + g * (plus[i]! - minus[i]!), 0);
      if (Math.abs(lossPlus - lossMinus - predicted) <= 1e-7 + 1e-2 * Math.abs(predicted)) break;
      misses.push(`step ${eps}: loss moved ${lossPlus - lossMinus}, the gradient predicts ${predicted}`);
    }
    expect(misses, parameter).to.have.length.below(2);
  }
}

describe('createModel', () => {
  for (const [depth, cases] of [['', SMALL], [' of depth 2', SMALL_DEEP]] as const) {
    for (const name of MODEL_NAMES) {
      it(`gives ${name}${depth} gradients that match central differences of its loss, parameter by parameter`, async () => {
        await checkGradients({ ...cases[name], seed: 7 });
      });
    }
  }

  it('names the parameters of each layer and block, in order', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    using mlp = await createModel(ops, { model: 'mlp', sizes: { ...SMALL.mlp.sizes, layers: 3 } });
    expect(mlp.parameters.map((p) => p.name)).to.deep.equal(['w1', 'b1', 'w2', 'b2', 'w3', 'b3', 'w4', 'b4']);
    const { inputs, hidden, outputs } = SMALL.mlp.sizes as MlpSizes;
    expect(mlp.parameters.map((p) => p.tensor.sizes)).to.deep.equal([[inputs, hidden], [1, hidden], [hidden, hidden], [1, hidden], [hidden, hidden], [1, hidden], [hidden, outputs], [1, outputs]]);
    using one = await createModel(ops, SMALL.transformer);
    using two = await createModel(ops, SMALL_DEEP.transformer);
    const blockNames = one.parameters.slice(0, -2).map((p) => p.name);
    expect(blockNames).to.have.length(12);
    expect(blockNames[0]).to.equal('ln1.gamma');
    expect(two.parameters.map((p) => p.name)).to.deep.equal([...blockNames.map((n) => `block1.${n}`), ...blockNames.map((n) => `block2.${n}`), 'head.w', 'head.b']);
  });





  it('frees every tensor of a step but the gradients it hands over, at every depth', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    for (const options of [SMALL.transformer, SMALL_DEEP.mlp, SMALL_DEEP.transformer]) {
      using model = await createModel(ops, options);
      const held = allocatedBytes(rt);
      const { gradients } = await model.lossAndGradients();
      expect(allocatedBytes(rt), options.model).to.be.greaterThan(held);
      for (const gradient of gradients) gradient.storage.release();
      expect(allocatedBytes(rt), options.model).to.equal(held);
    }
  });

  it('releases the tensors of a step that failed half-way, and its parameters once disposed', async () => {
    await using rt = await createRuntime();
    let opsLeft = Infinity;
    const failure = new Error('out of budget');
    const ops = createCpuOps(rt, {
      afterOp: () => {
        if (--opsLeft === 0) throw failure;
      },
    });
    const model = await createModel(ops, SMALL.transformer);
    const held = allocatedBytes(rt);
    opsLeft = 20;
    expect(await rejectionOf(model.lossAndGradients())).to.equal(failure);
    expect(allocatedBytes(rt)).to.equal(held);
    model[Symbol.dispose]();
    model[Symbol.dispose]();
    expect(allocatedBytes(rt)).to.equal(0);
  });

  it('rejects an unknown model, a size the model does not have, and sizes that are not positive integers', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    expect(await rejectionOf(createModel(ops, { model: 'rnn' } as unknown as ModelOptions))).to.be.instanceOf(InvalidArgumentError);
    expect(await rejectionOf(createModel(ops, { model: 'mlp', sizes: { hidden: 0 } }))).to.be.instanceOf(InvalidArgumentError);
    expect(await rejectionOf(createModel(ops, { model: 'transformer', sizes: { sequence: 2.5 } }))).to.be.instanceOf(InvalidArgumentError);
    expect(await rejectionOf(createModel(ops, { model: 'mlp', sizes: { layers: 0 } }))).to.be.instanceOf(InvalidArgumentError);
    expect(await rejectionOf(createModel(ops, { model: 'transformer', sizes: { blocks: 1.5 } }))).to.be.instanceOf(InvalidArgumentError);
    expect(await rejectionOf(createModel(ops, { model: 'mlp', sizes: { sequence: 4 } as Partial<MlpSizes> }))).to.be.instanceOf(InvalidArgumentError);
    expect(allocatedBytes(rt)).to.equal(0);
  });
});

describe('train', () => {
  for (const name of MODEL_NAMES) {
    it(`reduces the ${name}'s loss with its default sizes and learning rate`, async () => {
      await using rt = await createRuntime();
      const { losses, weights } = await train({ ops: createCpuOps(rt), model: name, steps: 8 });
      expect(losses).to.have.length(8);
      for (const loss of losses.slice(1)) expect(loss).to.be.lessThan(losses[0]!);
      expect(losses[7]).to.be.lessThan(0.75 * losses[0]!);
      expect(weights.every((w) => w.every(Number.isFinite))).to.equal(true);
    });
  }

  for (const options of [
    { model: 'mlp', sizes: { hidden: 128, layers: 16 } },
    { model: 'transformer', sizes: { sequence: 32, model: 64, hidden: 256, blocks: 6 } },
  ] as const) {
    it(`reduces a deep ${options.model}'s loss at the default learning rate`, async () => {
      await using rt = await createRuntime();
      const { losses } = await train({ ops: createCpuOps(rt), ...options, steps: 6 });
      for (const loss of losses.slice(1)) expect(loss).to.be.lessThan(losses[0]!);
      expect(losses[5]).to.be.lessThan(0.85 * losses[0]!);
    });
  }

  it('gives bit-identical losses and weights on two runs with the same seed, and others with another seed', async () => {
    const run = async (seed: number): Promise<{ losses: number[]; weights: Float32Array[] }> => {
      await using rt = await createRuntime();
      return await train({ ops: createCpuOps(rt), model: 'transformer', steps: 3, seed, sizes: { sequence: 32 } });
    };
    const [first, second, other] = [await run(3), await run(3), await run(4)];
    expect(second.losses).to.deep.equal(first.losses);
    expect(second.weights.map(bitsOf)).to.deep.equal(first.weights.map(bitsOf));
    expect(other.losses[0]).to.not.equal(first.losses[0]);
  });

  it('returns the weights in parameter order and leaves nothing allocated', async () => {
    await using rt = await createRuntime();
    const ops: Ops = createCpuOps(rt);
    const { weights } = await train({ ops, model: 'transformer', steps: 1 });
    const { model: d, hidden: f, outputs: o } = DEFAULT_TRANSFORMER_SIZES;
    expect(weights.map((w) => w.length)).to.deep.equal([d, d, d * d, d * d, d * d, d * d, d, d, d * f, f, f * d, d, d * o, o]);
    expect(allocatedBytes(rt)).to.equal(0);
  });

  it('reports each step to onStep and takes no step for zero steps', async () => {
    await using rt = await createRuntime();
    const seen: number[] = [];
    const { losses } = await train({ ops: createCpuOps(rt), ...SMALL.mlp, steps: 3, onStep: (step) => seen.push(step) });
    expect(seen).to.deep.equal([0, 1, 2]);
    expect(losses).to.have.length(3);
    expect((await train({ ops: createCpuOps(rt), ...SMALL.mlp, steps: 0 })).losses).to.deep.equal([]);
  });

  it('rejects a bad step count, learning rate or model with an InvalidArgumentError', async () => {
    await using rt = await createRuntime();
    const ops = createCpuOps(rt);
    for (const options of [
      { ops, model: 'mlp', steps: -1 },
      { ops, model: 'mlp', steps: 1.5 },
      { ops, model: 'mlp', steps: 1, lr: Number.NaN },
      { ops, model: 'gpt', steps: 1 },
    ]) {
      expect(await rejectionOf(train(options as Parameters<typeof train>[0]))).to.be.instanceOf(InvalidArgumentError);
    }
  });
});

function bitsOf(values: Float32Array): number[] {
  return [...new Uint32Array(values.buffer, values.byteOffset, values.length)];
}
