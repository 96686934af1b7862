import type { ModelTrace } from './Trace.js';
import { mlpForward, type MlpTraceShapes } from './mlpTrace.js';
import { resolveShapes } from './resolveShapes.js';
import { trainingTrace } from './trainingTrace.js';

/**
 * bf16; the MLP of `mlpTrace` with 8 layers of 1024 × 1024 (2 MiB each) over a batch of 256 (0.5 MiB per
 * activation), so that weights, Adam's m and v (each as large as its weight) and the gradients make most of P.
 */
export const DEFAULT_OPTIMIZER_TRACE_SHAPES: MlpTraceShapes = Object.freeze({ batch: 256, inputs: 1024, hidden: 1024, outputs: 1024, layers: 8, bytesPerElement: 2 });

/**
 * T5 of lms-anchors §7, an optimizer step over persistent state: the MLP of `mlpTrace` trained with Adam. Persistent:
 * the weights, then per weight `adam.m.<weight>` and `adam.v.<weight>` of its size. Each iteration: forward, loss, backward,
 * then per weight one Adam op that reads its gradient (and frees it) and updates the weight, m and v in place, so
 * the optimizer state is touched only at the end of each iteration.
 * @throws InvalidArgumentError for an unknown shape or one that is not a positive integer
 */
export function optimizerTrace(shapes?: Partial<MlpTraceShapes>): ModelTrace {
  const resolved = resolveShapes(DEFAULT_OPTIMIZER_TRACE_SHAPES, shapes);
  return trainingTrace({ name: 'optimizer', shapes: resolved, bytesPerElement: resolved.bytesPerElement, optimizer: 'adam', forward: (tape) => mlpForward(tape, resolved) });
}
