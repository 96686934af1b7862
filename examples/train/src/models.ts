import { InvalidArgumentError } from '@stowage/core';
import { checkOptions } from '@stowage/core/plugin-kit';
import { mulberry32, uniformArray } from './mulberry32.js';
import type { Ops, Tensor } from './Ops.js';
import { StepTensors } from './StepTensors.js';

// Two small models with hand-written backward passes, written the way a framework runs them:
//
// - Parameters and the (fixed, seeded) data live for the model's lifetime; everything else lives for one step.
// - The forward pass keeps what backward reads (activations, layer-norm statistics) and frees the rest as soon as
//   it is dead; backward frees each activation after its last use.
// - A step hands back one gradient per parameter; the caller applies them and frees them (see train.ts).
// - ReLU's backward reads its output (y > 0 exactly where x > 0), so the pre-activation is freed in the forward pass.
// - Depth (the MLP's `layers`, the transformer's `blocks`) repeats a layer or block: the live set of a step grows
//   with depth, while what one op reads and writes does not (Note [Depth and LMS]).
// - The data, then the weights, are drawn from one seeded generator in parameter order: a deeper model draws
//   more weights after the same ones, and its extra layers' scales leave depth 1's draws as they are.

// Note [Depth and LMS]: LMS runs a step under a budget below its peak by paging out the tensors no op is using,
// but the storages one op pins (its inputs and outputs) must fit the budget together. At depth 1 the largest op
// pins a large share of the step's peak (README, "Under LMS"); a deeper model keeps that working set while its
// peak grows with depth, which is the shape of the models LMS exists for.

export type ModelName = 'mlp' | 'transformer';

/** The models `createModel` and `train` know. */
export const MODEL_NAMES: readonly ModelName[] = Object.freeze(['mlp', 'transformer']);

/**
 * x [batch, inputs] → (Linear → ReLU) × layers → Linear → [batch, outputs], MSE against tanh(x · teacher). Parameters
 * `w1`, `b1`, …, `w{layers+1}`, `b{layers+1}`, in that order.
 */
export interface MlpSizes {
  readonly batch: number;
  readonly inputs: number;
  /** Width of every hidden layer. */
  readonly hidden: number;
  readonly outputs: number;
  /** Hidden Linear → ReLU layers before the output Linear; 1 is a two-layer MLP. */
  readonly layers: number;
}

/**
 * `blocks` stacked pre-layer-norm transformer blocks over one sequence x [sequence, model], each single-head causal
 * self-attention (Wq, Wk, Wv, Wo) and an MLP (model → hidden → model, ReLU), each with a residual, then a linear
 * head to [sequence, outputs]; MSE against a target that mixes each token with the mean of the tokens up to it.
 * Parameters: each block's (`ln1.gamma`, `ln1.beta`, `attention.wq`, …, `mlp.b2`, prefixed `block{i}.` from 1 when
 * there are several blocks), then `head.w`, `head.b`.
 */
export interface TransformerSizes {
  readonly sequence: number;
  readonly model: number;
  /** Width of each block's MLP. */
  readonly hidden: number;
  readonly outputs: number;
  /** Transformer blocks before the head. */
  readonly blocks: number;
}

export const DEFAULT_MLP_SIZES: MlpSizes = Object.freeze({ batch: 64, inputs: 64, hidden: 256, outputs: 16, layers: 1 });
/**
 * Sized so that a CPU step takes tens of milliseconds while every tensor (the largest is [sequence, hidden], 192 KiB)
 * is a small-pool request of the caching engine.
 */
export const DEFAULT_TRANSFORMER_SIZES: TransformerSizes = Object.freeze({ sequence: 128, model: 96, hidden: 384, outputs: 64, blocks: 1 });

export type ModelOptions =
  | { readonly model: 'mlp'; readonly seed?: number; readonly sizes?: Partial<MlpSizes> }
  | { readonly model: 'transformer'; readonly seed?: number; readonly sizes?: Partial<TransformerSizes> };

export interface Parameter {
  readonly name: string;
  readonly tensor: Tensor;
}

export interface Model extends Disposable {
  readonly name: ModelName;
  /** The trainable tensors, in a fixed order; `lossAndGradients` returns gradients in the same order. */
  readonly parameters: readonly Parameter[];
  /**
   * One forward and backward pass over the model's data: the loss before any update, and one gradient per
   * parameter (same order and shapes), which the caller owns and releases. Frees every other tensor it made,
   * also when it throws.
   */
  lossAndGradients(): Promise<{ loss: number; gradients: Tensor[] }>;
  /** Releases the parameters and the data. Idempotent. */
  [Symbol.dispose](): void;
}

const LAYER_NORM_EPS = 1e-5;
const DEFAULT_SEED = 1;

/**
 * A model with seeded initial weights (uniform, scaled by 1/sqrt(fan-in), or sqrt(2/fan-in) for a hidden layer fed
 * by a ReLU) and seeded data: the same options give the same bits. Sizes not given take the model's defaults.
 * @throws InvalidArgumentError for an unknown model, a seed that is not a safe integer, a size the model does not
 * have, or a size that is not a positive integer
 */
export async function createModel(ops: Ops, options: ModelOptions): Promise<Model> {
  const seed = options.seed ?? DEFAULT_SEED;
  if (!Number.isSafeInteger(seed)) throw new InvalidArgumentError('seed', seed, 'a safe integer');
  switch (options.model) {
    case 'mlp':
      return createMlp(ops, resolveSizes(DEFAULT_MLP_SIZES, options.sizes), seed);
    case 'transformer':
      return createTransformer(ops, resolveSizes(DEFAULT_TRANSFORMER_SIZES, options.sizes), seed);
    default:
      throw new InvalidArgumentError('model', (options as { model: unknown }).model, `one of ${MODEL_NAMES.join(', ')}`);
  }
}

/** One Linear layer's parameters. */
interface LinearParameters {
  readonly w: Tensor;
  readonly b: Tensor;
}

async function createMlp(ops: Ops, sizes: MlpSizes, seed: number): Promise<Model> {
  const { batch, inputs, hidden, outputs, layers } = sizes;
  const random = mulberry32(seed);
  const x = uniformArray(random, batch * inputs, 1);
  const teacher = uniformArray(random, inputs * outputs, Math.sqrt(3 / inputs));
  const target = matmul(x, teacher, batch, inputs, outputs).map(Math.tanh);
  const holder = new TensorHolder();
  try {
    const data = { x: holder.add(await ops.fromArray(batch, inputs, x)), target: holder.add(await ops.fromArray(batch, outputs, target)) };
    // The first layer reads the data (variance 1/3 per input); a hidden layer reads a ReLU's output, whose second
    // moment is half its input's, hence the doubled scale (He's) that keeps a deep stack's activations from fading.
    const hiddenLayers: LinearParameters[] = [];
    for (let i = 1; i <= layers; i++) {
      const fanIn = i === 1 ? inputs : hidden;
      const w = await holder.parameter(ops, `w${i}`, fanIn, hidden, uniformArray(random, fanIn * hidden, Math.sqrt((i === 1 ? 3 : 6) / fanIn)));
      const b = await holder.parameter(ops, `b${i}`, 1, hidden, new Float32Array(hidden));
      hiddenLayers.push({ w, b });
    }
    const last = layers + 1;
    const head: LinearParameters = {
      w: await holder.parameter(ops, `w${last}`, hidden, outputs, uniformArray(random, hidden * outputs, Math.sqrt(3 / hidden))),
      b: await holder.parameter(ops, `b${last}`, 1, outputs, new Float32Array(outputs)),
    };

    const lossAndGradients = async (): Promise<{ loss: number; gradients: Tensor[] }> => {
      using t = new StepTensors();
      // Forward: activations[i] is layer i's ReLU output (backward reads it twice: ReLU's mask, the next weight's
      // gradient); activations[0] is the data.
      const activations: Tensor[] = [data.x];
      for (const { w, b } of hiddenLayers) activations.push(await linearRelu(ops, t, activations.at(-1)!, w, b));
      const y = await linear(ops, t, activations.at(-1)!, head.w, head.b);
      const { loss, grad } = t.track(await ops.mseLoss(y, data.target));
      t.free(y);
      // Backward: the head, then each hidden layer from the last.
      const gradients: Tensor[] = [];
      gradients.push(t.track(await ops.matmul(activations[layers]!, grad, true, false)), t.track(await ops.sumRows(grad)));
      let da = t.track(await ops.matmul(grad, head.w, false, true));
      t.free(grad);
      for (let i = layers; i >= 1; i--) {
        const dh = t.track(await ops.reluBackward(da, activations[i]!));
        t.free(da, activations[i]!);
        const dw = t.track(await ops.matmul(activations[i - 1]!, dh, true, false));
        const db = t.track(await ops.sumRows(dh));
        gradients.unshift(dw, db);
        if (i > 1) da = t.track(await ops.matmul(dh, hiddenLayers[i - 1]!.w, false, true));
        t.free(dh);
      }
      const lossValue = await readScalar(ops, loss); // after backward was submitted, so a device need not stall mid-step
      t.free(loss);
      t.untrack(...gradients);
      return { loss: lossValue, gradients };
    };
    return holder.model('mlp', lossAndGradients);
  } catch (error) {
    holder[Symbol.dispose]();
    throw error;
  }
}

/** One transformer block's parameters. */
interface BlockParameters {
  readonly gamma1: Tensor;
  readonly beta1: Tensor;
  readonly wq: Tensor;
  readonly wk: Tensor;
  readonly wv: Tensor;
  readonly wo: Tensor;
  readonly gamma2: Tensor;
  readonly beta2: Tensor;
  readonly w1: Tensor;
  readonly b1: Tensor;
  readonly w2: Tensor;
  readonly b2: Tensor;
}

/** What a block's forward pass keeps for its backward pass (all tracked, its input x excepted). */
interface BlockActivations {
  /** The block's input (the data, or the previous block's output). */
  readonly x: Tensor;
  readonly ln1: { readonly y: Tensor; readonly mean: Tensor; readonly rstd: Tensor };
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  /** The attention weights, softmax(q·kᵀ · scale) with the causal mask. */
  readonly p: Tensor;
  /** p · v, before the output projection. */
  readonly att: Tensor;
  /** x plus the attention's output. */
  readonly x1: Tensor;
  readonly ln2: { readonly y: Tensor; readonly mean: Tensor; readonly rstd: Tensor };
  /** The MLP's ReLU output. */
  readonly r: Tensor;
}

async function createTransformer(ops: Ops, sizes: TransformerSizes, seed: number): Promise<Model> {
  const { sequence: s, model: d, hidden: f, outputs: o, blocks } = sizes;
  const random = mulberry32(seed);
  const x = uniformArray(random, s * d, 1);
  const target = transformerTarget(x, s, d, o, uniformArray(random, d * o, Math.sqrt(3 / d)), uniformArray(random, d * o, Math.sqrt(3 / d)));
  const attentionScale = 1 / Math.sqrt(d);
  const holder = new TensorHolder();
  try {
    const data = { x: holder.add(await ops.fromArray(s, d, x)), target: holder.add(await ops.fromArray(s, o, target)) };
    const ones = new Float32Array(d).fill(1);
    const weight = (rows: number, cols: number, gain = 1): Float32Array => uniformArray(random, rows * cols, gain * Math.sqrt(3 / rows));
    // The projections into the residual stream start smaller in a deeper stack (GPT-2's scaling), so that the
    // stream, which each block adds to, starts at about the same size whatever the depth.
    const residualGain = 1 / Math.sqrt(blocks);
    const stack: BlockParameters[] = [];
    for (let i = 1; i <= blocks; i++) {
      const prefix = blocks === 1 ? '' : `block${i}.`;
      const parameter = (name: string, rows: number, cols: number, values: Float32Array): Promise<Tensor> => holder.parameter(ops, prefix + name, rows, cols, values);
      stack.push({
        gamma1: await parameter('ln1.gamma', 1, d, ones),
        beta1: await parameter('ln1.beta', 1, d, new Float32Array(d)),
        wq: await parameter('attention.wq', d, d, weight(d, d)),
        wk: await parameter('attention.wk', d, d, weight(d, d)),
        wv: await parameter('attention.wv', d, d, weight(d, d)),
        wo: await parameter('attention.wo', d, d, weight(d, d, residualGain)),
        gamma2: await parameter('ln2.gamma', 1, d, ones),
        beta2: await parameter('ln2.beta', 1, d, new Float32Array(d)),
        w1: await parameter('mlp.w1', d, f, weight(d, f)),
        b1: await parameter('mlp.b1', 1, f, new Float32Array(f)),
        w2: await parameter('mlp.w2', f, d, weight(f, d, residualGain)),
        b2: await parameter('mlp.b2', 1, d, new Float32Array(d)),
      });
    }
    const head: LinearParameters = { w: await holder.parameter(ops, 'head.w', d, o, weight(d, o)), b: await holder.parameter(ops, 'head.b', 1, o, new Float32Array(o)) };

    const lossAndGradients = async (): Promise<{ loss: number; gradients: Tensor[] }> => {
      using t = new StepTensors();
      // Forward: the blocks, each keeping its activations; the last one's output feeds the head.
      const saved: BlockActivations[] = [];
      let xOut = data.x;
      for (const parameters of stack) {
        const { activations, y } = await blockForward(ops, t, parameters, xOut, attentionScale);
        saved.push(activations);
        xOut = y;
      }
      const out = await linear(ops, t, xOut, head.w, head.b);
      const { loss, grad } = t.track(await ops.mseLoss(out, data.target));
      t.free(out);

      // Backward: the head, then each block from the last (a block's input is the previous block's output, freed
      // once that block's backward no longer reads it).
      const dwh = t.track(await ops.matmul(xOut, grad, true, false));
      const dbh = t.track(await ops.sumRows(grad));
      let dy = t.track(await ops.matmul(grad, head.w, false, true));
      t.free(grad, xOut);
      const gradients: Tensor[] = [dwh, dbh];
      for (let i = blocks - 1; ; i--) {
        const { gradients: blockGradients, dx } = await blockBackward(ops, t, stack[i]!, saved[i]!, dy, attentionScale, i > 0);
        gradients.unshift(...blockGradients);
        if (dx === undefined) break; // the first block: the data needs no gradient
        dy = dx;
      }
      const lossValue = await readScalar(ops, loss); // after backward was submitted, so a device need not stall mid-step
      t.free(loss);
      t.untrack(...gradients);
      return { loss: lossValue, gradients };
    };
    return holder.model('transformer', lossAndGradients);
  } catch (error) {
    holder[Symbol.dispose]();
    throw error;
  }
}

/** One block's forward pass from x: its output y (tracked) and what its backward pass reads. Frees nothing of x. */
async function blockForward(ops: Ops, t: StepTensors, w: BlockParameters, x: Tensor, attentionScale: number): Promise<{ activations: BlockActivations; y: Tensor }> {
  // Attention.
  const ln1 = t.track(await ops.layerNorm(x, w.gamma1, w.beta1, LAYER_NORM_EPS));
  const h1 = ln1.y;
  const q = t.track(await ops.matmul(h1, w.wq));
  const k = t.track(await ops.matmul(h1, w.wk));
  const v = t.track(await ops.matmul(h1, w.wv));
  const rawScores = t.track(await ops.matmul(q, k, false, true));
  const scores = t.track(await ops.scale(rawScores, attentionScale));
  t.free(rawScores);
  const p = t.track(await ops.softmax(scores, true));
  t.free(scores);
  const att = t.track(await ops.matmul(p, v));
  const attOut = t.track(await ops.matmul(att, w.wo));
  const x1 = t.track(await ops.add(x, attOut));
  t.free(attOut);
  // MLP.
  const ln2 = t.track(await ops.layerNorm(x1, w.gamma2, w.beta2, LAYER_NORM_EPS));
  const r = await linearRelu(ops, t, ln2.y, w.w1, w.b1);
  const m2 = await linear(ops, t, r, w.w2, w.b2);
  const y = t.track(await ops.add(x1, m2));
  t.free(m2);
  return { activations: { x, ln1, q, k, v, p, att, x1, ln2, r }, y };
}

/**
 * One block's backward pass from dy, the gradient of its output (freed here): the block's gradients in parameter
 * order and, with `inputGradient`, the gradient of its input x (tracked). Frees every activation, and x with
 * `inputGradient` (x is then the previous block's output; the first block's x is the data, which lives on).
 */
async function blockBackward(
  ops: Ops,
  t: StepTensors,
  w: BlockParameters,
  a: BlockActivations,
  dy: Tensor,
  attentionScale: number,
  inputGradient: boolean,
): Promise<{ gradients: Tensor[]; dx: Tensor | undefined }> {
  // MLP (dy flows into both the residual and the MLP's output).
  const dw2 = t.track(await ops.matmul(a.r, dy, true, false));
  const db2 = t.track(await ops.sumRows(dy));
  const dr = t.track(await ops.matmul(dy, w.w2, false, true));
  const dm1 = t.track(await ops.reluBackward(dr, a.r));
  t.free(dr, a.r);
  const dw1 = t.track(await ops.matmul(a.ln2.y, dm1, true, false));
  const db1 = t.track(await ops.sumRows(dm1));
  const dh2 = t.track(await ops.matmul(dm1, w.w1, false, true));
  t.free(dm1, a.ln2.y);
  const ln2Grads = t.track(await ops.layerNormBackward(dh2, a.x1, a.ln2.mean, a.ln2.rstd, w.gamma2));
  t.free(dh2, a.x1, a.ln2.mean, a.ln2.rstd);
  const dx1 = t.track(await ops.add(dy, ln2Grads.dx));
  t.free(dy, ln2Grads.dx);
  // Attention (dx1 flows into the residual, x's gradient, and the attention's output).
  const dwo = t.track(await ops.matmul(a.att, dx1, true, false));
  const dAtt = t.track(await ops.matmul(dx1, w.wo, false, true));
  t.free(a.att);
  if (!inputGradient) t.free(dx1);
  const dp = t.track(await ops.matmul(dAtt, a.v, false, true));
  const dv = t.track(await ops.matmul(a.p, dAtt, true, false));
  t.free(dAtt);
  const dScores = t.track(await ops.softmaxBackward(dp, a.p));
  t.free(dp, a.p);
  const dRawScores = t.track(await ops.scale(dScores, attentionScale));
  t.free(dScores);
  const dq = t.track(await ops.matmul(dRawScores, a.k));
  const dk = t.track(await ops.matmul(dRawScores, a.q, true, false));
  t.free(dRawScores, a.q, a.k);
  const h1 = a.ln1.y;
  const dwq = t.track(await ops.matmul(h1, dq, true, false));
  const dwk = t.track(await ops.matmul(h1, dk, true, false));
  const dwv = t.track(await ops.matmul(h1, dv, true, false));
  t.free(h1);
  const dh1 = await sumOfProducts(ops, t, [
    [dq, w.wq],
    [dk, w.wk],
    [dv, w.wv],
  ]);
  const ln1Grads = t.track(await ops.layerNormBackward(dh1, a.x, a.ln1.mean, a.ln1.rstd, w.gamma1));
  t.free(dh1, a.ln1.mean, a.ln1.rstd);
  let dx: Tensor | undefined;
  if (inputGradient) {
    dx = t.track(await ops.add(dx1, ln1Grads.dx));
    t.free(dx1, a.x);
  }
  t.free(ln1Grads.dx);
  const gradients = [ln1Grads.dgamma, ln1Grads.dbeta, dwq, dwk, dwv, dwo, ln2Grads.dgamma, ln2Grads.dbeta, dw1, db1, dw2, db2];
  return { gradients, dx };
}

/** x · w + b, tracked (the product is freed). */
async function linear(ops: Ops, t: StepTensors, x: Tensor, w: Tensor, b: Tensor): Promise<Tensor> {
  const product = t.track(await ops.matmul(x, w));
  const y = t.track(await ops.addBias(product, b));
  t.free(product);
  return y;
}

/** relu(x · w + b), tracked; the pre-activation is freed (ReLU's backward reads the output). */
async function linearRelu(ops: Ops, t: StepTensors, x: Tensor, w: Tensor, b: Tensor): Promise<Tensor> {
  const h = await linear(ops, t, x, w, b);
  const y = t.track(await ops.relu(h));
  t.free(h);
  return y;
}

/** Σ dy_i · w_iᵀ over the pairs, in order (one tracked tensor); frees each dy_i after use. */
async function sumOfProducts(ops: Ops, t: StepTensors, pairs: readonly (readonly [dy: Tensor, w: Tensor])[]): Promise<Tensor> {
  let sum: Tensor | undefined;
  for (const [dy, w] of pairs) {
    const term = t.track(await ops.matmul(dy, w, false, true));
    t.free(dy);
    if (sum === undefined) {
      sum = term;
      continue;
    }
    const next = t.track(await ops.add(sum, term));
    t.free(sum, term);
    sum = next;
  }
  if (sum === undefined) throw new InvalidArgumentError('pairs', pairs, 'at least one pair');
  return sum;
}

async function readScalar(ops: Ops, x: Tensor): Promise<number> {
  const [value] = await ops.toArray(x);
  return value!;
}

/**
 * The tensors a model holds for its lifetime (data and parameters), released together.
 *
 * Invariants: `parameters` ⊆ `tensors`; every held tensor's storage is live until disposal.
 */
class TensorHolder implements Disposable {
  readonly #tensors: Tensor[] = [];
  readonly #parameters: Parameter[] = [];
  #disposed = false;

  add(tensor: Tensor): Tensor {
    this.#tensors.push(tensor);
    return tensor;
  }

  async parameter(ops: Ops, name: string, rows: number, cols: number, values: Float32Array): Promise<Tensor> {
    const tensor = this.add(await ops.fromArray(rows, cols, values));
    this.#parameters.push({ name, tensor });
    return tensor;
  }

  model(name: ModelName, lossAndGradients: () => Promise<{ loss: number; gradients: Tensor[] }>): Model {
    const parameters = Object.freeze([...this.#parameters]);
    return { name, parameters, lossAndGradients, [Symbol.dispose]: () => this[Symbol.dispose]() };
  }

  [Symbol.dispose](): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const tensor of this.#tensors) tensor.storage.release();
  }
}

/**
 * The defaults with the given sizes in their place (an undefined size keeps its default).
 * @throws InvalidArgumentError for a size the model does not have, or one that is not a positive integer
 */
function resolveSizes<S extends object>(defaults: S, given: Partial<S> | undefined): S {
  const sizes: Record<string, unknown> = {};
  Object.assign(sizes, defaults);
  for (const [name, value] of Object.entries(checkOptions('sizes', given, Object.keys(defaults)))) {
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || (value as number) <= 0) throw new InvalidArgumentError(`sizes.${name}`, value, 'a positive integer');
    sizes[name] = value;
  }
  return sizes as S;
}

/** Row-major a [m, k] · b [k, n] in float64, rounded to float32. */
function matmul(a: Float32Array, b: Float32Array, m: number, k: number, n: number): Float32Array {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let dot = 0;
      for (let p = 0; p < k; p++) dot += a[i * k + p]! * b[p * n + j]!;
      c[i * n + j] = dot;
    }
  }
  return c;
}

/** target[i] = tanh(x[i] · u + mean(x[0..i]) · w): learning it needs both the token and the causal attention. */
function transformerTarget(x: Float32Array, s: number, d: number, o: number, u: Float32Array, w: Float32Array): Float32Array {
  const prefixMean = new Float32Array(s * d);
  const running = new Float64Array(d);
  for (let i = 0; i < s; i++) {
    for (let j = 0; j < d; j++) {
      running[j] = running[j]! + x[i * d + j]!;
      prefixMean[i * d + j] = running[j]! / (i + 1);
    }
  }
  const own = matmul(x, u, s, d, o);
  const context = matmul(prefixMean, w, s, d, o);
  return own.map((value, i) => Math.tanh(value + context[i]!));
}
