import { checkOptions, InvalidArgumentError } from '@stowage/core';
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

export type ModelName = 'mlp' | 'transformer';

/** The models `createModel` and `train` know. */
export const MODEL_NAMES: readonly ModelName[] = Object.freeze(['mlp', 'transformer']);

/** x [batch, inputs] → Linear → ReLU → Linear → [batch, outputs], MSE against tanh(x · teacher). */
export interface MlpSizes {
  readonly batch: number;
  readonly inputs: number;
  readonly hidden: number;
  readonly outputs: number;
}

/**
 * One pre-layer-norm transformer block over one sequence x [sequence, model]: single-head causal self-attention
 * (Wq, Wk, Wv, Wo) and an MLP (model → hidden → model, ReLU), each with a residual, then a linear head to
 * [sequence, outputs]; MSE against a target that mixes each token with the mean of the tokens up to it.
 */
export interface TransformerSizes {
  readonly sequence: number;
  readonly model: number;
  readonly hidden: number;
  readonly outputs: number;
}

export const DEFAULT_MLP_SIZES: MlpSizes = Object.freeze({ batch: 64, inputs: 64, hidden: 256, outputs: 16 });
/**
 * Sized so that a CPU step takes tens of milliseconds while every tensor (the largest is [sequence, hidden], 192 KiB)
 * is a small-pool request of the caching engine.
 */
export const DEFAULT_TRANSFORMER_SIZES: TransformerSizes = Object.freeze({ sequence: 128, model: 96, hidden: 384, outputs: 64 });

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
 * A model with seeded initial weights (uniform, scaled by 1/sqrt(fan-in)) and seeded data: the same options give the
 * same bits. Sizes not given take the model's defaults.
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

async function createMlp(ops: Ops, sizes: MlpSizes, seed: number): Promise<Model> {
  const { batch, inputs, hidden, outputs } = sizes;
  const random = mulberry32(seed);
  const x = uniformArray(random, batch * inputs, 1);
  const teacher = uniformArray(random, inputs * outputs, Math.sqrt(3 / inputs));
  const target = matmul(x, teacher, batch, inputs, outputs).map(Math.tanh);
  const holder = new TensorHolder();
  try {
    const data = { x: holder.add(await ops.fromArray(batch, inputs, x)), target: holder.add(await ops.fromArray(batch, outputs, target)) };
    const w1 = await holder.parameter(ops, 'w1', inputs, hidden, uniformArray(random, inputs * hidden, Math.sqrt(3 / inputs)));
    const b1 = await holder.parameter(ops, 'b1', 1, hidden, new Float32Array(hidden));
    const w2 = await holder.parameter(ops, 'w2', hidden, outputs, uniformArray(random, hidden * outputs, Math.sqrt(3 / hidden)));
    const b2 = await holder.parameter(ops, 'b2', 1, outputs, new Float32Array(outputs));

    const lossAndGradients = async (): Promise<{ loss: number; gradients: Tensor[] }> => {
      using t = new StepTensors();
      // Forward.
      const a = await linearRelu(ops, t, data.x, w1, b1);
      const y = await linear(ops, t, a, w2, b2);
      const { loss, grad } = t.track(await ops.mseLoss(y, data.target));
      t.free(y);
      // Backward.
      const dw2 = t.track(await ops.matmul(a, grad, true, false));
      const db2 = t.track(await ops.sumRows(grad));
      const da = t.track(await ops.matmul(grad, w2, false, true));
      t.free(grad);
      const dh = t.track(await ops.reluBackward(da, a));
      t.free(da, a);
      const dw1 = t.track(await ops.matmul(data.x, dh, true, false));
      const db1 = t.track(await ops.sumRows(dh));
      t.free(dh);
      const gradients = [dw1, db1, dw2, db2];
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

async function createTransformer(ops: Ops, sizes: TransformerSizes, seed: number): Promise<Model> {
  const { sequence: s, model: d, hidden: f, outputs: o } = sizes;
  const random = mulberry32(seed);
  const x = uniformArray(random, s * d, 1);
  const target = transformerTarget(x, s, d, o, uniformArray(random, d * o, Math.sqrt(3 / d)), uniformArray(random, d * o, Math.sqrt(3 / d)));
  const attentionScale = 1 / Math.sqrt(d);
  const holder = new TensorHolder();
  try {
    const data = { x: holder.add(await ops.fromArray(s, d, x)), target: holder.add(await ops.fromArray(s, o, target)) };
    const ones = new Float32Array(d).fill(1);
    const weight = (rows: number, cols: number): Float32Array => uniformArray(random, rows * cols, Math.sqrt(3 / rows));
    const gamma1 = await holder.parameter(ops, 'ln1.gamma', 1, d, ones);
    const beta1 = await holder.parameter(ops, 'ln1.beta', 1, d, new Float32Array(d));
    const wq = await holder.parameter(ops, 'attention.wq', d, d, weight(d, d));
    const wk = await holder.parameter(ops, 'attention.wk', d, d, weight(d, d));
    const wv = await holder.parameter(ops, 'attention.wv', d, d, weight(d, d));
    const wo = await holder.parameter(ops, 'attention.wo', d, d, weight(d, d));
    const gamma2 = await holder.parameter(ops, 'ln2.gamma', 1, d, ones);
    const beta2 = await holder.parameter(ops, 'ln2.beta', 1, d, new Float32Array(d));
    const w1 = await holder.parameter(ops, 'mlp.w1', d, f, weight(d, f));
    const b1 = await holder.parameter(ops, 'mlp.b1', 1, f, new Float32Array(f));
    const w2 = await holder.parameter(ops, 'mlp.w2', f, d, weight(f, d));
    const b2 = await holder.parameter(ops, 'mlp.b2', 1, d, new Float32Array(d));
    const wh = await holder.parameter(ops, 'head.w', d, o, weight(d, o));
    const bh = await holder.parameter(ops, 'head.b', 1, o, new Float32Array(o));

    const lossAndGradients = async (): Promise<{ loss: number; gradients: Tensor[] }> => {
      using t = new StepTensors();
      // Forward: attention.
      const ln1 = t.track(await ops.layerNorm(data.x, gamma1, beta1, LAYER_NORM_EPS));
      const h1 = ln1.y;
      const q = t.track(await ops.matmul(h1, wq));
      const k = t.track(await ops.matmul(h1, wk));
      const v = t.track(await ops.matmul(h1, wv));
      const rawScores = t.track(await ops.matmul(q, k, false, true));
      const scores = t.track(await ops.scale(rawScores, attentionScale));
      t.free(rawScores);
      const p = t.track(await ops.softmax(scores, true));
      t.free(scores);
      const att = t.track(await ops.matmul(p, v));
      const attOut = t.track(await ops.matmul(att, wo));
      const x1 = t.track(await ops.add(data.x, attOut));
      t.free(attOut);
      // Forward: MLP, head, loss.
      const ln2 = t.track(await ops.layerNorm(x1, gamma2, beta2, LAYER_NORM_EPS));
      const h2 = ln2.y;
      const r = await linearRelu(ops, t, h2, w1, b1);
      const m2 = await linear(ops, t, r, w2, b2);
      const x2 = t.track(await ops.add(x1, m2));
      t.free(m2);
      const out = await linear(ops, t, x2, wh, bh);
      const { loss, grad } = t.track(await ops.mseLoss(out, data.target));
      t.free(out);

      // Backward: head.
      const dwh = t.track(await ops.matmul(x2, grad, true, false));
      const dbh = t.track(await ops.sumRows(grad));
      const dx2 = t.track(await ops.matmul(grad, wh, false, true));
      t.free(grad, x2);
      // Backward: MLP (dx2 flows into both the residual and the MLP's output).
      const dw2 = t.track(await ops.matmul(r, dx2, true, false));
      const db2 = t.track(await ops.sumRows(dx2));
      const dr = t.track(await ops.matmul(dx2, w2, false, true));
      const dm1 = t.track(await ops.reluBackward(dr, r));
      t.free(dr, r);
      const dw1 = t.track(await ops.matmul(h2, dm1, true, false));
      const db1 = t.track(await ops.sumRows(dm1));
      const dh2 = t.track(await ops.matmul(dm1, w1, false, true));
      t.free(dm1, h2);
      const ln2Grads = t.track(await ops.layerNormBackward(dh2, x1, ln2.mean, ln2.rstd, gamma2));
      t.free(dh2, x1, ln2.mean, ln2.rstd);
      const dx1 = t.track(await ops.add(dx2, ln2Grads.dx));
      t.free(dx2, ln2Grads.dx);
      // Backward: attention (dx1 flows into the residual, which needs no gradient, and the attention's output).
      const dwo = t.track(await ops.matmul(att, dx1, true, false));
      const dAtt = t.track(await ops.matmul(dx1, wo, false, true));
      t.free(att, dx1);
      const dp = t.track(await ops.matmul(dAtt, v, false, true));
      const dv = t.track(await ops.matmul(p, dAtt, true, false));
      t.free(dAtt);
      const dScores = t.track(await ops.softmaxBackward(dp, p));
      t.free(dp, p);
      const dRawScores = t.track(await ops.scale(dScores, attentionScale));
      t.free(dScores);
      const dq = t.track(await ops.matmul(dRawScores, k));
      const dk = t.track(await ops.matmul(dRawScores, q, true, false));
      t.free(dRawScores, q, k);
      const dwq = t.track(await ops.matmul(h1, dq, true, false));
      const dwk = t.track(await ops.matmul(h1, dk, true, false));
      const dwv = t.track(await ops.matmul(h1, dv, true, false));
      t.free(h1);
      const dh1 = await sumOfProducts(ops, t, [
        [dq, wq],
        [dk, wk],
        [dv, wv],
      ]);
      const ln1Grads = t.track(await ops.layerNormBackward(dh1, data.x, ln1.mean, ln1.rstd, gamma1));
      t.free(dh1, ln1.mean, ln1.rstd, ln1Grads.dx);

      const gradients = [ln1Grads.dgamma, ln1Grads.dbeta, dwq, dwk, dwv, dwo, ln2Grads.dgamma, ln2Grads.dbeta, dw1, db1, dw2, db2, dwh, dbh];
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
