import type { IterationTrace, ModelTrace } from '@stowage/example-train';
import { TraceBuilder } from '@stowage/example-train';
import { InvalidArgumentError } from '@stowage/core';

// The layer kit of the published setups' traces (published/models.ts): a reverse-mode tape over example-train's
// TraceBuilder, with the layers of ResNet-50, VGG-16, 3D U-Net, BERT and GPT-2. It follows the rules of
// example-train's trace layers (traces/layers.ts), which it does not import (they are internal to that package):
//
// - A weighted layer (convolution of any kernel, stride and dimension; a linear layer) is one GEMM forward and two
//   backward ops, ∂x = ∂y·Wᵀ (reads ∂y, W) and ∂W = xᵀ·∂y (reads x, ∂y), each with the forward's flops; no biases.
// - Saved for backward, as the frameworks the papers used keep them: a weighted layer its input, a batch or layer
//   norm its input (and its scale and shift), ReLU and softmax their output, GELU its input, max pooling its input,
//   average pooling nothing. No op works in place (TensorFlow's ops do not).
// - Elementwise ops count 1 flop per output element, GELU 8, a norm 5 forward and 8 backward, softmax 5 and 3.
// - A residual's two inputs share ∂y (example-train's Tape#shareGrad, Note [Gradient accumulation] there).
// - The optimizer runs after backward, one op per weight: SGD with momentum (a persistent velocity per weight),
//   Adam (persistent m and v), or mixed-precision Adam (fp16 weights and gradients, an fp32 master copy, m and v:
//   16 bytes per parameter, as ZeRO counts them).

/** How the weights are updated after backward. */
export type Optimizer = 'momentum' | 'adam' | 'mixed-adam';

/** A tensor handle of the tape's TraceBuilder, with its shape in elements. */
export type Handle = number;

export class Net {
  readonly trace = new TraceBuilder();
  readonly #backward: (() => void)[] = [];
  readonly #grads = new Map<Handle, Handle>();
  readonly #inputs = new Set<Handle>();
  readonly #parameters: Handle[] = [];

  /**
   * @param bytesPerElement bytes of one element of activations, gradients and weights (4 for fp32, 2 for fp16)
   */
  constructor(readonly bytesPerElement: number) {}

  get parameters(): readonly Handle[] {
    return this.#parameters;
  }

  parameter(name: string, elements: number): Handle {
    const p = this.trace.persistent(name, elements * this.bytesPerElement);
    this.#parameters.push(p);
    return p;
  }

  activation(name: string, elements: number): Handle {
    return this.trace.tensor(name, elements * this.bytesPerElement);
  }

  /** The iteration's data batch (`bytesPerElement` each: 4 for token ids), loaded by an op of its own; it takes no gradient. */
  input(name: string, elements: number, bytesPerElement: number = this.bytesPerElement): Handle {
    const x = this.trace.tensor(name, elements * bytesPerElement);
    this.trace.op(`load ${name}`, { writes: [x], flops: 0 });
    this.#inputs.add(x);
    return x;
  }

  elementsOf(x: Handle): number {
    return this.trace.bytesOf(x) / this.bytesPerElement;
  }

  requiresGrad(x: Handle): boolean {
    return !this.#inputs.has(x);
  }

  grad(x: Handle): Handle {
    let g = this.#grads.get(x);
    if (g === undefined) {
      g = this.trace.tensor(`grad.${this.trace.nameOf(x)}`, this.trace.bytesOf(x));
      this.#grads.set(x, g);
    }
    return g;
  }

  /** Makes y's gradient the gradient of each of `to` too (a residual's inputs). */
  shareGrad(y: Handle, to: readonly Handle[]): void {
    const g = this.grad(y);
    for (const x of to) {
      if (!this.requiresGrad(x)) continue;
      if (this.#grads.has(x)) throw new InvalidArgumentError('shareGrad', this.trace.nameOf(x), 'a tensor without a gradient yet');
      this.#grads.set(x, g);
    }
  }

  onBackward(step: () => void): void {
    this.#backward.push(step);
  }

  backward(): void {
    while (this.#backward.length > 0) this.#backward.pop()!();
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
    net.trace.op('loss', { reads: [y], writes: [net.grad(y)], flops: 3 * net.elementsOf(y) });
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

/** y [rows, out] = x [rows, in] · W [in, out]. */
export function linear(net: Net, name: string, x: Handle, rows: number, inFeatures: number, outFeatures: number): Handle {
  return weighted(net, name, x, { weightElements: inFeatures * outFeatures, outElements: rows * outFeatures, flops: 2 * rows * inFeatures * outFeatures });
}

/** A batch norm over channels (or a layer norm over features): scale and shift of `features` each; saves its input. */
export function norm(net: Net, name: string, x: Handle, features: number): Handle {
  const scale = net.parameter(`${name}.scale`, features);
  const shift = net.parameter(`${name}.shift`, features);
  const elements = net.elementsOf(x);
  const y = net.activation(`${name}.out`, elements);
  net.trace.op(name, { reads: [x, scale, shift], writes: [y], flops: 5 * elements });
  net.onBackward(() => {
    const params = [net.grad(scale), net.grad(shift)];
    net.trace.op(`${name}.backward`, { reads: [x, net.grad(y), scale], writes: net.requiresGrad(x) ? [net.grad(x), ...params] : params, flops: 8 * elements });
  });
  return y;
}

export function relu(net: Net, name: string, x: Handle): Handle {
  return elementwise(net, name, x, { flops: 1, saves: 'output' });
}

export function gelu(net: Net, name: string, x: Handle): Handle {
  return elementwise(net, name, x, { flops: 8, saves: 'input' });
}

export function softmax(net: Net, name: string, x: Handle): Handle {
  return elementwise(net, name, x, { flops: 5, backwardFlops: 3, saves: 'output' });
}

/** y = a + b; both take ∂y itself. */
export function add(net: Net, name: string, a: Handle, b: Handle): Handle {
  const elements = net.elementsOf(a);
  const y = net.activation(`${name}.out`, elements);
  net.trace.op(name, { reads: [a, b], writes: [y], flops: elements });
  net.onBackward(() => net.shareGrad(y, [a, b]));
  return y;
}

/** y = a and b side by side (a U-Net's concatenation); backward splits ∂y. */
export function concat(net: Net, name: string, a: Handle, b: Handle): Handle {
  const elements = net.elementsOf(a) + net.elementsOf(b);
  const y = net.activation(`${name}.out`, elements);
  net.trace.op(name, { reads: [a, b], writes: [y], flops: elements });
  net.onBackward(() => {
    net.trace.op(`${name}.backward`, { reads: [net.grad(y)], writes: [a, b].filter((t) => net.requiresGrad(t)).map((t) => net.grad(t)), flops: elements });
  });
  return y;
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
  const scores = net.activation(`${name}.scores.out`, batch * heads * sequence * sequence);
  const flops = 2 * batch * sequence * sequence * model;
  net.trace.op(`${name}.scores`, { reads: [qkv], writes: [scores], flops });
  net.onBackward(() => net.trace.op(`${name}.scores.backward`, { reads: [net.grad(scores), qkv], writes: [net.grad(qkv)], flops: 2 * flops }));
  const probabilities = softmax(net, `${name}.softmax`, scores);
  const context = net.activation(`${name}.values.out`, batch * sequence * model);
  net.trace.op(`${name}.values`, { reads: [probabilities, qkv], writes: [context], flops });
  net.onBackward(() => {
    net.trace.op(`${name}.values.backward`, { reads: [net.grad(context), probabilities, qkv], writes: [net.grad(probabilities), net.grad(qkv)], flops: 2 * flops });
  });
  return context;
}

/** y [rows, out] = x [rows, in] · Wᵀ with an existing weight W [out, in] (a language model's head tied to its embedding). */
export function linearWith(net: Net, name: string, x: Handle, w: Handle, rows: number, inFeatures: number, outFeatures: number): Handle {
  return weighted(net, name, x, { weight: w, outElements: rows * outFeatures, flops: 2 * rows * inFeatures * outFeatures });
}

function weighted(net: Net, name: string, x: Handle, shape: { weightElements?: number; weight?: Handle; outElements: number; flops: number }): Handle {
  const w = shape.weight ?? net.parameter(`${name}.weight`, shape.weightElements!);
  const y = net.activation(`${name}.out`, shape.outElements);
  net.trace.op(name, { reads: [x, w], writes: [y], flops: shape.flops });
  net.onBackward(() => {
    const gy = net.grad(y);
    if (net.requiresGrad(x)) net.trace.op(`${name}.backward.input`, { reads: [gy, w], writes: [net.grad(x)], flops: shape.flops });
    net.trace.op(`${name}.backward.weight`, { reads: [x, gy], writes: [net.grad(w)], flops: shape.flops });
  });
  return y;
}

function elementwise(net: Net, name: string, x: Handle, kind: { flops: number; backwardFlops?: number; saves: 'input' | 'output' }): Handle {
  const elements = net.elementsOf(x);
  const y = net.activation(`${name}.out`, elements);
  net.trace.op(name, { reads: [x], writes: [y], flops: kind.flops * elements });
  net.onBackward(() => {
    if (!net.requiresGrad(x)) return;
    net.trace.op(`${name}.backward`, { reads: [kind.saves === 'input' ? x : y, net.grad(y)], writes: [net.grad(x)], flops: (kind.backwardFlops ?? kind.flops) * elements });
  });
  return y;
}
