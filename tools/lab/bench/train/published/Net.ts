import type { IterationTrace, ModelTrace } from '@stowage/example-train';
import { attentionScores, attentionValues, loss, norm as normOf, softmax, Tape, TraceBuilder, weighted } from '@stowage/example-train';
import { InvalidArgumentError } from '@stowage/core';

// The published setups' traces (published/models.ts) are built from example-train's layer kit (its `Tape` and
// layers: the rules are in its traces/layers.ts: one GEMM forward and two backward per weighted layer, no biases,
// what each layer saves for backward, the flops of elementwise ops, residuals sharing ∂y). This file adds what the
// papers' models need beyond it:
//
// - Convolutions of any kernel, stride and dimension (2D images, 3D volumes) and transposed ones, as weighted layers.
// - Batch and layer norms with a scale and a shift; max pooling (saves its input) and average pooling (saves
//   nothing); embeddings; materialised multi-head attention; a head tied to the embedding (`linearWith`).
// - The optimizer, after backward, one op per weight: SGD with momentum (a persistent velocity per weight), Adam
//   (persistent m and v), or mixed-precision Adam (fp16 weights and gradients, an fp32 master copy, m and v: 16
//   bytes per parameter, as ZeRO counts them).

export { add, concat, gelu, linear, relu } from '@stowage/example-train';

/** How the weights are updated after backward. */
export type Optimizer = 'momentum' | 'adam' | 'mixed-adam';

/** A tensor handle of the tape's TraceBuilder, with its shape in elements. */
export type Handle = number;

/** A tape over a trace of its own. */
export class Net extends Tape {
  /**
   * @param bytesPerElement bytes of one element of activations, gradients and weights (4 for fp32, 2 for fp16)
   */
  constructor(bytesPerElement: number) {
    super(new TraceBuilder(), bytesPerElement);
  }
}

/** What a model generator gives `modelTrace`. */
export interface ModelSpec {
  readonly name: string;
  readonly shapes: ModelTrace['shapes'];
  readonly bytesPerElement: number;
  readonly optimizer: Optimizer;
  /** Emits the forward pass (its input included) and returns the output the loss reads; the same weights every call. */
  forward(net: Net): Handle;
}

/**
 * The training trace of `spec`: forward, the loss (3 flops per output element), backward in reverse order, then
 * one optimizer op per weight in declaration order. Every iteration is the same; each is built when first asked for.
 */
export function modelTrace(spec: ModelSpec): ModelTrace {
  const build = () => {
    const net = new Net(spec.bytesPerElement);
    const y = spec.forward(net);
    loss(net, y);
    net.backward();
    for (const w of net.parameters) updateWeight(net, spec.optimizer, w);
    return net.trace.build();
  };
  const first = build();
  return {
    name: spec.name,
    shapes: spec.shapes,
    persistent: first.persistent,
    iteration(i: number): IterationTrace {
      if (!Number.isSafeInteger(i) || i < 0) throw new InvalidArgumentError('iteration', i, 'a non-negative integer');
      return first.iteration; // the iterations of a fixed-shape training loop are identical
    },
  };
}

/** Momentum SGD: 3 flops per element (v = μv + g; w −= lr·v). Adam: about 12. */
function updateWeight(net: Net, optimizer: Optimizer, w: Handle): void {
  const { trace } = net;
  const name = trace.nameOf(w);
  const elements = net.elementsOf(w);
  if (optimizer === 'momentum') {
    const v = trace.persistent(`momentum.${name}`, trace.bytesOf(w));
    trace.op(`sgd ${name}`, { reads: [net.grad(w)], writes: [w, v], flops: 3 * elements });
    return;
  }
  const fp32 = elements * 4;
  const state = optimizer === 'mixed-adam' ? [trace.persistent(`master.${name}`, fp32)] : [];
  const m = trace.persistent(`adam.m.${name}`, fp32);
  const v = trace.persistent(`adam.v.${name}`, fp32);
  trace.op(`adam ${name}`, { reads: [net.grad(w)], writes: [w, ...state, m, v], flops: 12 * elements });
}

// ---- layers -------------------------------------------------------------------------------------------------

/** A convolution's geometry: `spatial` input extents (2 for images, 3 for volumes), square kernel, stride, padding "same" / stride. */
export interface ConvShape {
  readonly batch: number;
  readonly inChannels: number;
  readonly outChannels: number;
  /** Input extent per spatial dimension (H, W or D, H, W). */
  readonly spatial: readonly number[];
  readonly kernel: number;
  readonly stride?: number;
}

/** Output extents of a convolution with "same" padding: ceil(extent / stride). */
export function convOut(spatial: readonly number[], stride = 1): number[] {
  return spatial.map((s) => Math.ceil(s / stride));
}

function product(values: readonly number[]): number {
  return values.reduce((p, v) => p * v, 1);
}

/** y [batch, out, …convOut] = convolution of x; flops 2 · batch · outVoxels · in · out · kernel^dims. */
export function conv(net: Net, name: string, x: Handle, shape: ConvShape): Handle {
  const dims = shape.spatial.length;
  const outVoxels = product(convOut(shape.spatial, shape.stride));
  const taps = shape.kernel ** dims;
  return weighted(net, name, x, {
    weightElements: taps * shape.inChannels * shape.outChannels,
    outElements: shape.batch * outVoxels * shape.outChannels,
    flops: 2 * shape.batch * outVoxels * shape.inChannels * shape.outChannels * taps,
  });
}

/** A stride-2, kernel-2 transposed convolution (a U-Net's up path): doubles each extent. */
export function upConv(net: Net, name: string, x: Handle, shape: Omit<ConvShape, 'kernel' | 'stride'>): Handle {
  const dims = shape.spatial.length;
  const inVoxels = product(shape.spatial);
  const taps = 2 ** dims;
  return weighted(net, name, x, {
    weightElements: taps * shape.inChannels * shape.outChannels,
    outElements: shape.batch * inVoxels * taps * shape.outChannels,
    flops: 2 * shape.batch * inVoxels * shape.inChannels * shape.outChannels * taps,
  });
}

/** A batch norm over channels (or a layer norm over features): scale and shift of `features` each; saves its input. */
export function norm(net: Net, name: string, x: Handle, features: number): Handle {
  return normOf(net, name, x, features, { shift: true });
}

/**
 * Pooling to `outElements` (max pooling saves its input and reads it with ∂y in backward; average pooling saves
 * nothing); `window` elements per output, as flops.
 */
export function pool(net: Net, name: string, x: Handle, outElements: number, kind: 'max' | 'average', window: number): Handle {
  const y = net.activation(`${name}.out`, outElements);
  net.trace.op(name, { reads: [x], writes: [y], flops: outElements * window });
  net.onBackward(() => {
    if (!net.requiresGrad(x)) return;
    const reads = kind === 'max' ? [x, net.grad(y)] : [net.grad(y)];
    net.trace.op(`${name}.backward`, { reads, writes: [net.grad(x)], flops: net.elementsOf(x) });
  });
  return y;
}

/** A token embedding (and position embedding) lookup: y [rows, width]; backward scatters ∂y into ∂table. */
export function embedding(net: Net, name: string, ids: Handle, table: Handle, rows: number, width: number): Handle {
  const y = net.activation(`${name}.out`, rows * width);
  net.trace.op(name, { reads: [ids, table], writes: [y], flops: rows * width });
  net.onBackward(() => net.trace.op(`${name}.backward`, { reads: [ids, net.grad(y)], writes: [net.grad(table)], flops: rows * width }));
  return y;
}

/**
 * Multi-head self-attention over qkv [batch·sequence, 3·model], materialised (no fused kernel): scores
 * [batch·heads, sequence, sequence] = Q·Kᵀ, probabilities = softmax(scores), context = probabilities · V.
 */
export function attention(net: Net, name: string, qkv: Handle, batch: number, heads: number, sequence: number, model: number): Handle {
  const scores = attentionScores(net, `${name}.scores`, qkv, batch, heads, sequence, model);
  const probabilities = softmax(net, `${name}.softmax`, scores);
  return attentionValues(net, `${name}.values`, probabilities, qkv, batch, sequence, model);
}

/** y [rows, out] = x [rows, in] · Wᵀ with an existing weight W [out, in] (a language model's head tied to its embedding). */
export function linearWith(net: Net, name: string, x: Handle, w: Handle, rows: number, inFeatures: number, outFeatures: number): Handle {
  return weighted(net, name, x, { weight: w, outElements: rows * outFeatures, flops: 2 * rows * inFeatures * outFeatures });
}
