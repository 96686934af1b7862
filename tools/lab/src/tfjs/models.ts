import * as tf from '@tensorflow/tfjs-core';

/** A model built in code: its variables, a forward pass, and a batch to train on. */
export interface Model {
  readonly name: string;
  readonly variables: tf.Variable[];
  readonly x: tf.Tensor;
  readonly labels: tf.Tensor;
  predict(x: tf.Tensor): tf.Tensor;
}

/** What a run produced, as raw bytes (compared bit for bit). */
export interface ModelRun {
  readonly prediction: Float32Array;
  readonly losses: number[];
  /** Every variable's values after training, concatenated. */
  readonly weights: Float32Array;
}

const seeded = (shape: number[], seed: number, scale = 0.1): tf.Variable => tf.variable(tf.mul(tf.randomNormal(shape, 0, 1, 'float32', seed), scale));

/** A two-layer perceptron: 128 → 256 (relu) → 10, batch 64. */
export function mlp(): Model {
  const w1 = seeded([128, 256], 1);
  const b1 = tf.variable(tf.zeros([256]));
  const w2 = seeded([256, 10], 2);
  const b2 = tf.variable(tf.zeros([10]));
  return {
    name: 'mlp',
    variables: [w1, b1, w2, b2],
    x: tf.randomNormal([64, 128], 0, 1, 'float32', 3),
    labels: tf.oneHot(tf.tensor1d(Array.from({ length: 64 }, (_, i) => (i * 7) % 10), 'int32'), 10),
    predict: (x) => tf.add(tf.matMul(tf.relu(tf.add(tf.matMul(x, w1), b1)), w2), b2),
  };
}

/** A small conv net: 16×16×3 → conv 3×3×8 (relu) → max pool 2 → conv 3×3×16 (relu) → global mean → 10, batch 8. */
export function convNet(): Model {
  const k1 = seeded([3, 3, 3, 8], 11, 0.3);
  const k2 = seeded([3, 3, 8, 16], 12, 0.2);
  const w = seeded([16, 10], 13, 0.3);
  const b = tf.variable(tf.zeros([10]));
  return {
    name: 'conv',
    variables: [k1, k2, w, b],
    x: tf.randomNormal([8, 16, 16, 3], 0, 1, 'float32', 14),
    labels: tf.oneHot(tf.tensor1d([0, 1, 2, 3, 4, 5, 6, 7], 'int32'), 10),
    predict: (x) => {
      const h1 = tf.maxPool(tf.relu(tf.conv2d(x as tf.Tensor4D, k1 as tf.Tensor4D, 1, 'same')), 2, 2, 'valid');
      const h2 = tf.relu(tf.conv2d(h1, k2 as tf.Tensor4D, 1, 'same'));
      return tf.add(tf.matMul(tf.mean(h2, [1, 2]), w), b);
    },
  };
}

/**
 * A transformer block (pre-norm, two heads, model width 32, sequence 16, batch 2): layer norm, multi-head
 * self-attention with softmax, residual, layer norm, a 64-wide relu MLP, residual; then a mean over the sequence
 * and a 10-way classifier.
 */
export function transformerBlock(): Model {
  const [batch, seq, width, heads] = [2, 16, 32, 2];
  const headWidth = width / heads;
  const wq = seeded([width, width], 21);
  const wk = seeded([width, width], 22);
  const wv = seeded([width, width], 23);
  const wo = seeded([width, width], 24);
  const g1 = tf.variable(tf.ones([width]));
  const g2 = tf.variable(tf.ones([width]));
  const f1 = seeded([width, 64], 25);
  const f2 = seeded([64, width], 26);
  const wc = seeded([width, 10], 27);
  const layerNorm = (h: tf.Tensor, gain: tf.Tensor): tf.Tensor => {
    const { mean, variance } = tf.moments(h, -1, true);
    return tf.mul(tf.div(tf.sub(h, mean), tf.sqrt(tf.add(variance, 1e-5))), gain);
  };
  const project = (h2d: tf.Tensor, wt: tf.Tensor): tf.Tensor => tf.transpose(tf.reshape(tf.matMul(h2d, wt), [batch, seq, heads, headWidth]), [0, 2, 1, 3]);
  return {
    name: 'transformer',
    variables: [wq, wk, wv, wo, g1, g2, f1, f2, wc],
    x: tf.randomNormal([batch, seq, width], 0, 1, 'float32', 28),
    labels: tf.oneHot(tf.tensor1d([3, 8], 'int32'), 10),
    predict: (x) => {
      const h = tf.reshape(layerNorm(x, g1), [batch * seq, width]);
      const q = project(h, wq);
      const k = project(h, wk);
      const v = project(h, wv);
      const scores = tf.div(tf.matMul(q, k, false, true), Math.sqrt(headWidth));
      const attended = tf.matMul(tf.softmax(scores), v);
      const merged = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]), [batch * seq, width]);
      const x1 = tf.add(x, tf.reshape(tf.matMul(merged, wo), [batch, seq, width]));
      const h2 = tf.reshape(layerNorm(x1, g2), [batch * seq, width]);
      const x2 = tf.add(x1, tf.reshape(tf.matMul(tf.relu(tf.matMul(h2, f1)), f2), [batch, seq, width]));
      return tf.matMul(tf.mean(x2, 1), wc);
    },
  };
}

/** The models, by name (building one needs a tfjs backend). */
export const MODELS: readonly { readonly name: string; readonly make: () => Model }[] = [
  { name: 'mlp', make: mlp },
  { name: 'conv', make: convNet },
  { name: 'transformer', make: transformerBlock },
];

/**
 * Predicts, then trains `steps` Adam steps on softmax cross-entropy, reading each loss; disposes the model.
 * `afterStep` runs after each step, once its loss is read (the LMS backend's `endLmsStep`, say), and
 * `afterPredict` after the prediction (default `afterStep`). With `midStep`, each step is split at an async point:
 * `optimizer.computeGradients`, `await midStep()` (the LMS backend's `lmsSettle`), `optimizer.applyGradients` (the
 * same bits as `minimize`).
 */
export async function runModel(
  make: () => Model,
  steps: number,
  afterStep?: () => Promise<void>,
  afterPredict: (() => Promise<void>) | undefined = afterStep,
  midStep?: () => Promise<void>,
): Promise<ModelRun> {
  const model = make();
  try {
    const before = tf.tidy(() => model.predict(model.x));
    const prediction = (await before.data()) as Float32Array;
    before.dispose();
    await afterPredict?.();
    const optimizer = tf.train.adam(0.01);
    const losses: number[] = [];
    for (let step = 0; step < steps; step++) {
      const lossOf = (): tf.Scalar => tf.losses.softmaxCrossEntropy(model.labels, model.predict(model.x)) as tf.Scalar;
      let loss: tf.Scalar | null;
      if (midStep === undefined) loss = optimizer.minimize(lossOf, true, model.variables);
      else {
        const { value, grads } = optimizer.computeGradients(lossOf, model.variables);
        await midStep(); // the async point inside the step: the gradients can get host copies
        optimizer.applyGradients(grads as unknown as Parameters<typeof optimizer.applyGradients>[0]); // tfjs types it as variables; any tensors do
        tf.dispose(grads);
        loss = value;
      }
      losses.push((await loss!.data())[0]!);
      loss!.dispose();
      await afterStep?.();
    }
    optimizer.dispose();
    const values = await Promise.all(model.variables.map((v) => v.data() as Promise<Float32Array>));
    const weights = new Float32Array(values.reduce((n, v) => n + v.length, 0));
    let at = 0;
    for (const v of values) {
      weights.set(v, at);
      at += v.length;
    }
    return { prediction, losses, weights };
  } finally {
    for (const v of model.variables) v.dispose();
    model.x.dispose();
    model.labels.dispose();
  }
}
