import type { Tape } from './Tape.js';
import type { ModelTrace } from './Trace.js';
import { linear, relu } from './layers.js';
import { resolveShapes } from './resolveShapes.js';
import { trainingTrace } from './trainingTrace.js';

/**
 * A layer stack: input [batch, inputs] → (linear → ReLU) × (layers − 1) → linear → [batch, outputs], every hidden
 * layer `hidden` wide, no biases; SGD.
 */
export type MlpTraceShapes = {
  readonly batch: number;
  readonly inputs: number;
  readonly hidden: number;
  readonly outputs: number;
  /** Linear layers, the output layer included. */
  readonly layers: number;
  /** 2 for bf16, 4 for fp32. */
  readonly bytesPerElement: number;
};

/**
 * bf16; 16 layers of 1024 × 1024 (2 MiB each) over a batch of 1024 (2 MiB per activation). The forward keeps each
 * ReLU's output for backward, so P ≈ 32 MiB of weights + 15 × 2 MiB of activations + a few in flight (70 MiB).
 */
export const DEFAULT_MLP_TRACE_SHAPES: MlpTraceShapes = Object.freeze({ batch: 1024, inputs: 1024, hidden: 1024, outputs: 1024, layers: 16, bytesPerElement: 2 });

/**
 * T1 of lms-anchors §7, a layer stack: activations are made in forward and read in backward in LIFO order, where LRU
 * picks what Belady-MIN picks. Each iteration: forward (a linear op, then a ReLU op that frees the linear's output),
 * the loss, backward (per layer ∂x then ∂W, the ReLU's ∂x), then one SGD op per weight, which frees its gradient.
 * @throws InvalidArgumentError for an unknown shape or one that is not a positive integer
 */
export function mlpTrace(shapes?: Partial<MlpTraceShapes>): ModelTrace {
  const resolved = resolveShapes(DEFAULT_MLP_TRACE_SHAPES, shapes);
  return trainingTrace({ name: 'mlp', shapes: resolved, bytesPerElement: resolved.bytesPerElement, optimizer: 'sgd', forward: (tape) => mlpForward(tape, resolved) });
}

/** The MLP's forward pass, weights `fc1.weight` … `fc<layers>.weight`; returns the output. */
export function mlpForward(tape: Tape, shapes: MlpTraceShapes): number {
  let x = tape.input('input', shapes.batch * shapes.inputs);
  for (let layer = 1; layer <= shapes.layers; layer++) {
    const isLast = layer === shapes.layers;
    const inFeatures = layer === 1 ? shapes.inputs : shapes.hidden;
    x = linear(tape, `fc${layer}`, x, shapes.batch, inFeatures, isLast ? shapes.outputs : shapes.hidden);
    if (!isLast) x = relu(tape, `relu${layer}`, x);
  }
  return x;
}
