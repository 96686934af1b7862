import { InvalidArgumentError } from '@stowage/core';
import type { MlpSizes, ModelName, TransformerSizes } from './models.js';
import { createModel, DEFAULT_TRANSFORMER_SIZES, MODEL_NAMES } from './models.js';
import type { Ops } from './Ops.js';

export type TrainOptions = {
  readonly ops: Ops;
  /** Optimizer steps to run (each: forward, backward, one SGD update per parameter). */
  readonly steps: number;
  /** Seeds the data and the initial weights; 1 when absent. */
  readonly seed?: number;
  /**
   * SGD learning rate. When absent: DEFAULT_LEARNING_RATES[model], divided by blocks² for a transformer of several
   * blocks (plain SGD on a stack of blocks without a final layer norm diverges at the one-block rate).
   */
  readonly lr?: number;
  /** Called once the model is made and its data uploaded, before the first step. */
  readonly onStart?: () => void;
  /** Called after each step with its index and its loss (the loss before that step's update). */
  readonly onStep?: (step: number, loss: number) => void;
} & ({ readonly model: 'mlp'; readonly sizes?: Partial<MlpSizes> } | { readonly model: 'transformer'; readonly sizes?: Partial<TransformerSizes> });

export interface TrainResult {
  /** The loss of each step, before its update. */
  readonly losses: number[];
  /** The parameters after the last step, in the model's parameter order (`Model#parameters`). */
  readonly weights: Float32Array[];
}

/** Learning rates with which every default-sized model's loss goes down steadily (for one block or any depth of MLP). */
export const DEFAULT_LEARNING_RATES: Readonly<Record<ModelName, number>> = Object.freeze({ mlp: 0.5, transformer: 0.25 });

/**
 * Trains a seeded model for `steps` steps with plain SGD on its fixed data, then reads its weights back. Every
 * tensor it made is released when it returns or throws: only the ops' own caches stay.
 * @throws InvalidArgumentError for an unknown model, a step count that is not a non-negative integer, a learning rate that is not
 * finite, or bad model options (see createModel); whatever an op throws (OutOfMemoryError, say)
 */
export async function train(options: TrainOptions): Promise<TrainResult> {
  const { ops, steps, onStart, onStep } = options;
  if (!Number.isSafeInteger(steps) || steps < 0) throw new InvalidArgumentError('steps', steps, 'a non-negative integer');
  if (!MODEL_NAMES.includes(options.model)) throw new InvalidArgumentError('model', options.model, `one of ${MODEL_NAMES.join(', ')}`);
  const lr = options.lr ?? defaultLearningRate(options);
  if (!Number.isFinite(lr)) throw new InvalidArgumentError('lr', lr, 'a finite number');
  using model = await createModel(ops, options);
  onStart?.();
  const losses: number[] = [];
  for (let step = 0; step < steps; step++) {
    const { loss, gradients } = await model.lossAndGradients();
    try {
      for (const [i, { tensor }] of model.parameters.entries()) await ops.sgdStep(tensor, gradients[i]!, lr);
    } finally {
      for (const gradient of gradients) gradient.storage.release();
    }
    losses.push(loss);
    onStep?.(step, loss);
  }
  const weights: Float32Array[] = [];
  for (const { tensor } of model.parameters) weights.push(await ops.toArray(tensor));
  await ops.finish();
  return { losses, weights };
}

function defaultLearningRate(options: TrainOptions): number {
  if (options.model === 'mlp') return DEFAULT_LEARNING_RATES.mlp;
  const blocks = options.sizes?.blocks ?? DEFAULT_TRANSFORMER_SIZES.blocks;
  return DEFAULT_LEARNING_RATES.transformer / blocks ** 2;
}
