import { InvalidArgumentError } from '@stowage/core';
import type { TraceBuilder } from './TraceBuilder.js';

/**
 * Reverse-mode bookkeeping over a `TraceBuilder`, for the trace generators' layers (`layers.ts`):
 *
 * - Layers declare their weights with `parameter` and their outputs with `activation`, emit their forward op, and
 *   register their backward ops with `onBackward`; `backward` runs those in reverse (LIFO) order.
 * - `grad(x)` is the handle of x's gradient, declared on first use: the backward op that first writes it creates
 *   it, and any later one accumulates into it in place (Note [Gradient accumulation]).
 * - Inputs (`input`) take no gradient: layers skip the ops that would compute one (`requiresGrad`).
 *
 * Invariant: every handle in `#grads` (as key or value) is a handle of `trace`.
 */
export class Tape {
  readonly #backward: (() => void)[] = [];
  /** Tensor handle → its gradient's handle. */
  readonly #grads = new Map<number, number>();
  readonly #inputs = new Set<number>();
  readonly #parameters: number[] = [];

  /**
   * @param trace where the ops go
   * @param bytesPerElement bytes of one element of every tensor the layers declare (2 for bf16, 4 for fp32)
   */
  constructor(
    readonly trace: TraceBuilder,
    readonly bytesPerElement: number,
  ) {}

  /** The weights declared so far, in declaration order. */
  get parameters(): readonly number[] {
    return this.#parameters;
  }

  /** Declares a weight (persistent) of `elements` elements. */
  parameter(name: string, elements: number): number {
    const p = this.trace.persistent(name, elements * this.bytesPerElement);
    this.#parameters.push(p);
    return p;
  }

  /** Declares an iteration tensor of `elements` elements (an activation, a gradient). */
  activation(name: string, elements: number): number {
    return this.trace.tensor(name, elements * this.bytesPerElement);
  }

  /**
   * Declares the iteration's data batch (`bytesPerElement` each, the tape's by default: 4 for token ids) and emits
   * the op that loads it; it takes no gradient.
   */
  input(name: string, elements: number, bytesPerElement: number = this.bytesPerElement): number {
    const x = this.trace.tensor(name, elements * bytesPerElement);
    this.trace.op(`load ${name}`, { writes: [x], flops: 0 });
    this.#inputs.add(x);
    return x;
  }

  elementsOf(x: number): number {
    return this.trace.bytesOf(x) / this.bytesPerElement;
  }

  requiresGrad(x: number): boolean {
    return !this.#inputs.has(x);
  }

  /** The handle of x's gradient, declared (`grad.<name of x>`, x's size) on the first call for x. */
  grad(x: number): number {
    let g = this.#grads.get(x);
    if (g === undefined) {
      g = this.trace.tensor(`grad.${this.trace.nameOf(x)}`, this.trace.bytesOf(x));
      this.#grads.set(x, g);
    }
    return g;
  }

  /**
   * Makes y's gradient also the gradient of each of `to` (a residual's inputs: ∂(a + b)/∂a = ∂(a + b)/∂b = 1).
   * See Note [Gradient accumulation] for when that is sound.
   * @throws InvalidArgumentError when one of `to` already has a gradient
   */
  shareGrad(y: number, to: readonly number[]): void {
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

  /** Runs the registered backward steps, last registered first; each runs once. */
  backward(): void {
    while (this.#backward.length > 0) this.#backward.pop()!();
  }
}

// Note [Gradient accumulation]: a tensor read by several forward ops gets one gradient contribution from each of
// their backward ops. The first creates the gradient and the others add into it in place, as a framework
// accumulates `.grad` (a U-Net skip: the concat's backward creates it, the downsample's backward adds to it). A
// residual y = a + b passes ∂y to both inputs unchanged, so `shareGrad` lets a and b use ∂y itself instead of two
// copies. That is sound when a's other consumers lie on b's branch, as in a pre-norm block (a feeds the norm that
// starts the branch to b): b's backward reads ∂y before the norm's backward, the last op of the branch, adds a's
// other contribution into it.
