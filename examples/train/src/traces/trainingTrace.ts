import { InvalidArgumentError } from '@stowage/core';
import { loss } from './layers.js';
import { Tape } from './Tape.js';
import type { IterationTrace, ModelTrace } from './Trace.js';
import { TraceBuilder } from './TraceBuilder.js';

/** How the weights are updated after backward: `sgd` (w -= lr·∂w) or `adam` (with persistent m and v per weight). */
export type Optimizer = 'sgd' | 'adam';

/** What a generator gives `trainingTrace`: its model, as layers on a tape. */
export interface TrainingModel {
  readonly name: string;
  readonly shapes: ModelTrace['shapes'];
  /** Bytes of one element of every tensor. */
  readonly bytesPerElement: number;
  readonly optimizer: Optimizer;
  /**
   * Emits iteration `iteration`'s forward pass (its input included) and returns the output the loss reads. It
   * must declare the same weights, in the same order, for every iteration.
   */
  forward(tape: Tape, iteration: number): number;
}

/**
 * The trace of training `model`, each iteration being: the forward pass, the loss, the backward pass in reverse
 * (LIFO) order, then one optimizer op per weight, in declaration order. Iterations are built when first asked for.
 */
export function trainingTrace(model: TrainingModel): ModelTrace {
  const built = new Map<number, IterationTrace>();
  const step = (i: number) => {
    const trace = new TraceBuilder();
    const tape = new Tape(trace, model.bytesPerElement);
    loss(tape, model.forward(tape, i));
    tape.backward();
    for (const w of tape.parameters) updateWeight(tape, model.optimizer, w);
    return trace.build();
  };
  const first = step(0);
  built.set(0, first.iteration);
  return {
    name: model.name,
    shapes: model.shapes,
    persistent: first.persistent,
    iteration(i: number): IterationTrace {
      if (!Number.isSafeInteger(i) || i < 0) throw new InvalidArgumentError('iteration', i, 'a non-negative integer');
      let iteration = built.get(i);
      if (iteration === undefined) {
        iteration = step(i).iteration;
        built.set(i, iteration);
      }
      return iteration;
    },
  };
}

/** SGD: 2 flops per element (w -= lr·g). Adam: about 12 (two moment updates, a square root, a division, a step). */
function updateWeight(tape: Tape, optimizer: Optimizer, w: number): void {
  const name = tape.trace.nameOf(w);
  const elements = tape.elementsOf(w);
  if (optimizer === 'sgd') {
    tape.trace.op(`sgd ${name}`, { reads: [tape.grad(w)], writes: [w], flops: 2 * elements });
  } else {
    const m = tape.trace.persistent(`adam.m.${name}`, tape.trace.bytesOf(w));
    const v = tape.trace.persistent(`adam.v.${name}`, tape.trace.bytesOf(w));
    tape.trace.op(`adam ${name}`, { reads: [tape.grad(w)], writes: [w, m, v], flops: 12 * elements });
  }
}
