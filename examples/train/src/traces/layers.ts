import type { Tape } from './Tape.js';

// The layers the trace generators build their models from. Each emits its forward op on the tape's trace, names
// its output `<name>.out`, and registers its backward ops, which read what the forward saved:
//
// - A weighted layer (linear, 3×3 convolution, 2×2 transposed convolution) is one GEMM forward and two backward:
//   ∂x = ∂y · Wᵀ (reads ∂y, W) and ∂W = xᵀ · ∂y (reads x, ∂y), each with the forward's flops; no biases.
// - ReLU and softmax save their output, GELU and the norms their input: their backward reads it with ∂y.
// - Elementwise ops count 1 flop per output element, GELU 8, a norm 5 forward and 8 backward, softmax 5 and 3.
// - Shapes are row-major element counts; every tensor has the tape's bytes per element.

/** y [rows, outFeatures] = x [rows, inFeatures] · W [inFeatures, outFeatures]. */
export function linear(tape: Tape, name: string, x: number, rows: number, inFeatures: number, outFeatures: number): number {
  return weighted(tape, name, x, { weightElements: inFeatures * outFeatures, outElements: rows * outFeatures, flops: 2 * rows * inFeatures * outFeatures });
}

/** y [batch, outChannels, size, size] = 3×3 convolution (padding 1) of x [batch, inChannels, size, size]. */
export function conv3x3(tape: Tape, name: string, x: number, batch: number, inChannels: number, outChannels: number, size: number): number {
  const pixels = batch * size * size;
  return weighted(tape, name, x, { weightElements: 9 * inChannels * outChannels, outElements: pixels * outChannels, flops: 2 * pixels * inChannels * outChannels * 9 });
}

/** y [batch, outChannels, 2·size, 2·size] = 2×2, stride 2 transposed convolution of x [batch, inChannels, size, size]. */
export function upConv2x2(tape: Tape, name: string, x: number, batch: number, inChannels: number, outChannels: number, size: number): number {
  const pixels = batch * size * size;
  return weighted(tape, name, x, { weightElements: 4 * inChannels * outChannels, outElements: 4 * pixels * outChannels, flops: 2 * pixels * inChannels * outChannels * 4 });
}

export function relu(tape: Tape, name: string, x: number): number {
  return elementwise(tape, name, x, { flopsPerElement: 1, saves: 'output' });
}

export function gelu(tape: Tape, name: string, x: number): number {
  return elementwise(tape, name, x, { flopsPerElement: 8, saves: 'input' });
}

/** Softmax over the last axis of x (attention scores). */
export function softmax(tape: Tape, name: string, x: number): number {
  return elementwise(tape, name, x, { flopsPerElement: 5, backwardFlopsPerElement: 3, saves: 'output' });
}

/**
 * A layer norm over the `features` axis of x (or a batch norm over the channels): normalises, then scales by a
 * weight of `features` elements (and, with `shift`, adds a second). Backward reads x, ∂y and the scale; writes ∂x
 * and the weights' gradients.
 */
export function norm(tape: Tape, name: string, x: number, features: number, options: { readonly shift?: boolean } = {}): number {
  const scale = tape.parameter(`${name}.scale`, features);
  const shift = options.shift === true ? tape.parameter(`${name}.shift`, features) : undefined;
  const elements = tape.elementsOf(x);
  const y = tape.activation(`${name}.out`, elements);
  tape.trace.op(name, { reads: shift === undefined ? [x, scale] : [x, scale, shift], writes: [y], flops: 5 * elements });
  tape.onBackward(() => {
    let writes: number[];
    if (shift === undefined) writes = tape.requiresGrad(x) ? [tape.grad(x), tape.grad(scale)] : [tape.grad(scale)];
    else {
      const weights = [tape.grad(scale), tape.grad(shift)]; // declared before ∂x, as the published setups always did
      writes = tape.requiresGrad(x) ? [tape.grad(x), ...weights] : weights;
    }
    tape.trace.op(`${name}.backward`, { reads: [x, tape.grad(y), scale], writes, flops: 8 * elements });
  });
  return y;
}

/** y = a + b (a residual); the backward is free: both take ∂y itself (`Tape#shareGrad`). */
export function add(tape: Tape, name: string, a: number, b: number): number {
  const elements = tape.elementsOf(a);
  const y = tape.activation(`${name}.out`, elements);
  tape.trace.op(name, { reads: [a, b], writes: [y], flops: elements });
  tape.onBackward(() => tape.shareGrad(y, [a, b]));
  return y;
}

/** y = a and b side by side (channels of a U-Net's up path and skip); backward splits ∂y into ∂a and ∂b. */
export function concat(tape: Tape, name: string, a: number, b: number): number {
  const elements = tape.elementsOf(a) + tape.elementsOf(b);
  const y = tape.activation(`${name}.out`, elements);
  tape.trace.op(name, { reads: [a, b], writes: [y], flops: elements });
  tape.onBackward(() => {
    tape.trace.op(`${name}.backward`, { reads: [tape.grad(y)], writes: [a, b].filter((x) => tape.requiresGrad(x)).map((x) => tape.grad(x)), flops: elements });
  });
  return y;
}

/** 2×2 average pooling: a quarter of x's elements; backward spreads ∂y over ∂x. */
export function downsample(tape: Tape, name: string, x: number): number {
  const elements = tape.elementsOf(x);
  const y = tape.activation(`${name}.out`, elements / 4);
  tape.trace.op(name, { reads: [x], writes: [y], flops: elements });
  tape.onBackward(() => {
    if (tape.requiresGrad(x)) tape.trace.op(`${name}.backward`, { reads: [tape.grad(y)], writes: [tape.grad(x)], flops: elements });
  });
  return y;
}

/**
 * scores [batch·heads, sequence, sequence] = Q·Kᵀ per head, Q and K being slices of qkv [batch·sequence, 3·model].
 * Backward reads ∂scores and qkv, and writes the Q and K parts of ∂qkv.
 */
export function attentionScores(tape: Tape, name: string, qkv: number, batch: number, heads: number, sequence: number, model: number): number {
  const scores = tape.activation(`${name}.out`, batch * heads * sequence * sequence);
  const flops = 2 * batch * sequence * sequence * model;
  tape.trace.op(name, { reads: [qkv], writes: [scores], flops });
  tape.onBackward(() => tape.trace.op(`${name}.backward`, { reads: [tape.grad(scores), qkv], writes: [tape.grad(qkv)], flops: 2 * flops }));
  return scores;
}

/**
 * context [batch·sequence, model] = probabilities · V per head, V being a slice of qkv. Backward reads ∂context,
 * the probabilities and qkv; writes ∂probabilities and the V part of ∂qkv.
 */
export function attentionValues(tape: Tape, name: string, probabilities: number, qkv: number, batch: number, sequence: number, model: number): number {
  const context = tape.activation(`${name}.out`, batch * sequence * model);
  const flops = 2 * batch * sequence * sequence * model;
  tape.trace.op(name, { reads: [probabilities, qkv], writes: [context], flops });
  tape.onBackward(() => {
    tape.trace.op(`${name}.backward`, { reads: [tape.grad(context), probabilities, qkv], writes: [tape.grad(probabilities), tape.grad(qkv)], flops: 2 * flops });
  });
  return context;
}

/** The loss of the model's output y: reads y, writes ∂loss/∂y (3 flops per element, as for a mean squared error). */
export function loss(tape: Tape, y: number): void {
  tape.trace.op('loss', { reads: [y], writes: [tape.grad(y)], flops: 3 * tape.elementsOf(y) });
}

/**
 * A weighted layer of any shape (the rules in this file's header): y of `outElements` from x and a weight of
 * `weightElements` declared as `<name>.weight`, or an existing `weight` (a head tied to an embedding).
 */
export function weighted(tape: Tape, name: string, x: number, shape: { readonly weightElements?: number; readonly weight?: number; readonly outElements: number; readonly flops: number }): number {
  const w = shape.weight ?? tape.parameter(`${name}.weight`, shape.weightElements!);
  const y = tape.activation(`${name}.out`, shape.outElements);
  tape.trace.op(name, { reads: [x, w], writes: [y], flops: shape.flops });
  tape.onBackward(() => {
    const gy = tape.grad(y);
    if (tape.requiresGrad(x)) tape.trace.op(`${name}.backward.input`, { reads: [gy, w], writes: [tape.grad(x)], flops: shape.flops });
    tape.trace.op(`${name}.backward.weight`, { reads: [x, gy], writes: [tape.grad(w)], flops: shape.flops });
  });
  return y;
}

function elementwise(tape: Tape, name: string, x: number, kind: { flopsPerElement: number; backwardFlopsPerElement?: number; saves: 'input' | 'output' }): number {
  const elements = tape.elementsOf(x);
  const y = tape.activation(`${name}.out`, elements);
  tape.trace.op(name, { reads: [x], writes: [y], flops: kind.flopsPerElement * elements });
  tape.onBackward(() => {
    if (!tape.requiresGrad(x)) return;
    const saved = kind.saves === 'input' ? x : y;
    tape.trace.op(`${name}.backward`, { reads: [saved, tape.grad(y)], writes: [tape.grad(x)], flops: (kind.backwardFlopsPerElement ?? kind.flopsPerElement) * elements });
  });
  return y;
}
