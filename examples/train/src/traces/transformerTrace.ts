import type { Tape } from './Tape.js';
import type { ModelTrace } from './Trace.js';
import { add, attentionScores, attentionValues, gelu, linear, norm, softmax } from './layers.js';
import { resolveShapes } from './resolveShapes.js';
import { trainingTrace } from './trainingTrace.js';

/**
 * `blocks` pre-norm transformer blocks over input [batch·sequence, model]; each block:
 * x → norm → QKV projection [batch·sequence, 3·model] → scores [batch·heads, sequence, sequence] → softmax → × V
 * → output projection → + x, then → norm → MLP up [batch·sequence, hidden] → GELU → MLP down → + (its input).
 * Attention is materialised (no fused kernel); no biases; SGD.
 */
export type TransformerTraceShapes = {
  readonly batch: number;
  readonly sequence: number;
  readonly model: number;
  readonly heads: number;
  /** Width of each block's MLP. */
  readonly hidden: number;
  readonly blocks: number;
  /** 2 for bf16, 4 for fp32. */
  readonly bytesPerElement: number;
};

/** `TransformerTraceShapes` with one sequence length per iteration in place of `sequence`. */
export type TransformerVaryingTraceShapes = Omit<TransformerTraceShapes, 'sequence'> & {
  /** Iteration i runs sequences[i % sequences.length]. */
  readonly sequences: readonly number[];
};

/**
 * bf16; 8 blocks, model 256, 4 heads, MLP 1024, one sequence of 512: an activation [512, 256] is 256 KiB, the
 * scores [4, 512, 512] 2 MiB, a block's weights 1.5 MiB.
 */
export const DEFAULT_TRANSFORMER_TRACE_SHAPES: TransformerTraceShapes = Object.freeze({ batch: 1, sequence: 512, model: 256, heads: 4, hidden: 1024, blocks: 8, bytesPerElement: 2 });

/** `DEFAULT_TRANSFORMER_TRACE_SHAPES` with the sequence length cycling through 512, 384, 640, 448. */
export const DEFAULT_TRANSFORMER_VARYING_TRACE_SHAPES: TransformerVaryingTraceShapes = Object.freeze({
  batch: 1,
  sequences: Object.freeze([512, 384, 640, 448]),
  model: 256,
  heads: 4,
  hidden: 1024,
  blocks: 8,
  bytesPerElement: 2,
});

/**
 * T2 of lms-anchors §7, transformer blocks with attention reuse: the QKV tensor is read twice in forward (by the
 * scores and by × V), and each residual input is read again at the block's end, uses LRU mishandles. Each iteration:
 * forward, loss, backward in reverse reading the saved activations, one SGD op per weight.
 * @throws InvalidArgumentError for an unknown shape or one that is not a positive integer
 */
export function transformerTrace(shapes?: Partial<TransformerTraceShapes>): ModelTrace {
  const resolved = resolveShapes(DEFAULT_TRANSFORMER_TRACE_SHAPES, shapes);
  return trainingTrace({
    name: 'transformer',
    shapes: resolved,
    bytesPerElement: resolved.bytesPerElement,
    optimizer: 'sgd',
    forward: (tape) => transformerForward(tape, resolved, resolved.sequence),
  });
}

/**
 * T4 of lms-anchors §7: `transformerTrace` with a different sequence length every iteration, iteration i running
 * sequences[i % sequences.length], so that a policy meets each length new once and then again. The weights (and so
 * the persistent tensors) do not depend on the length.
 * @throws InvalidArgumentError for an unknown shape, a count that is not a positive integer, or an empty list
 */
export function transformerVaryingTrace(shapes?: Partial<TransformerVaryingTraceShapes>): ModelTrace {
  const resolved = resolveShapes(DEFAULT_TRANSFORMER_VARYING_TRACE_SHAPES, shapes);
  const { sequences } = resolved;
  return trainingTrace({
    name: 'transformer-varying',
    shapes: resolved,
    bytesPerElement: resolved.bytesPerElement,
    optimizer: 'sgd',
    forward: (tape, i) => transformerForward(tape, resolved, sequences[i % sequences.length]!),
  });
}

function transformerForward(tape: Tape, shapes: Omit<TransformerTraceShapes, 'sequence'>, sequence: number): number {
  const { batch, model, heads, hidden } = shapes;
  const rows = batch * sequence;
  let x = tape.input('input', rows * model);
  for (let block = 1; block <= shapes.blocks; block++) {
    const at = (layer: string) => `block${block}.${layer}`;
    const qkv = linear(tape, at('qkv'), norm(tape, at('norm1'), x, model), rows, model, 3 * model);
    const probabilities = softmax(tape, at('softmax'), attentionScores(tape, at('scores'), qkv, batch, heads, sequence, model));
    const attention = linear(tape, at('proj'), attentionValues(tape, at('values'), probabilities, qkv, batch, sequence, model), rows, model, model);
    const afterAttention = add(tape, at('residual1'), x, attention);
    const up = gelu(tape, at('gelu'), linear(tape, at('up'), norm(tape, at('norm2'), afterAttention, model), rows, model, hidden));
    x = add(tape, at('residual2'), afterAttention, linear(tape, at('down'), up, rows, hidden, model));
  }
  return x;
}
