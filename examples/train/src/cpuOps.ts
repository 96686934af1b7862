import type { Runtime } from '@stowage/core';
import { hostBytes, InvalidArgumentError } from '@stowage/core';
import type { Ops, PinScope, Tensor } from './Ops.js';
import {
  addBiasInto,
  addInto,
  layerNormBackwardInto,
  layerNormInto,
  matmulInto,
  mseLossInto,
  reluBackwardInto,
  reluInto,
  scaleInto,
  sgdStepInPlace,
  softmaxBackwardInto,
  softmaxInto,
  sumRowsInto,
} from './hostMath.js';
import { noPin } from './noPin.js';
import type { Shape } from './shapes.js';
import { describeShape, shapeChecks } from './shapes.js';

// The CPU reference implementation of Ops: plain loops over Float32Array views of host storages.
//
// - Every op runs as: pin its inputs, allocate its outputs, pin its outputs, compute, unpin, call afterOp
//   (Note [Pin before allocating]).
// - Float32Array views are taken only inside the compute step, after pinning, and never outlive it: under LMS an
//   unpinned storage may be paged out, and its DataPtr's bytes then belong to someone else.
// - Inputs are read through `data()`, outputs and sgdStep's parameter written through `mutableData()`.
// - The arithmetic is hostMath.ts's, on those views: sums in float64 in a fixed order, rounded once to float32, so
//   the same inputs always give the same bits.
// - A failed op releases the outputs it allocated and leaves its inputs unchanged.

// Note [Pin before allocating]: allocating an op's outputs can make LMS reclaim (page out) inactive storages to meet
// the budget. An input pinned only after the outputs were allocated may have been the victim, and would then be
// paged straight back in. Pinning the inputs first makes them ineligible; the outputs are pinned as soon as they
// exist, before anything writes them.

/** A tensor's [rows, cols]. */
const { shapeOf, checkShape } = shapeChecks('cpu');

/** The outputs of an op with output shapes S, one tensor per shape. */
type Outputs<S extends readonly Shape[]> = { -readonly [I in keyof S]: Tensor };

export interface CpuOpsOptions {
  /** Pins an op's storages while it reads and writes them; `noPin` (a guard that does nothing) when absent. */
  readonly pin?: PinScope;
  /** Called after every op that succeeded, once its guard was disposed (a memory probe, say). */
  readonly afterOp?: () => void;
}

/**
 * The training ops on the runtime's CPU allocator. Tensors must be contiguous float32 [rows, cols] CPU tensors;
 * outputs are made with `runtime.tensor([rows, cols], { dtype: 'float32' })` and belong to the caller.
 * Every op throws InvalidArgumentError for a tensor of another dtype, rank or layout, or for mismatched shapes.
 */
export function createCpuOps(runtime: Runtime, options: CpuOpsOptions = {}): Ops {
  return new CpuOps(runtime, options.pin ?? noPin, options.afterOp);
}

class CpuOps implements Ops {
  readonly device = 'cpu';
  readonly #runtime: Runtime;
  readonly #pin: PinScope;
  readonly #afterOp: (() => void) | undefined;

  constructor(runtime: Runtime, pin: PinScope, afterOp: (() => void) | undefined) {
    this.#runtime = runtime;
    this.#pin = pin;
    this.#afterOp = afterOp;
  }

  async fromArray(rows: number, cols: number, values: Float32Array): Promise<Tensor> {
    if (values.length !== rows * cols) throw new InvalidArgumentError('values.length', values.length, `rows * cols = ${rows * cols}`);
    const [y] = await this.#op([], [[rows, cols]], ([y]) => writeView(y).set(values));
    return y;
  }

  async toArray(x: Tensor): Promise<Float32Array> {
    shapeOf('x', x);
    let values = new Float32Array(0);
    await this.#op([x], [], () => {
      values = readView(x).slice();
    });
    return values;
  }

  async matmul(a: Tensor, b: Tensor, transA = false, transB = false): Promise<Tensor> {
    const [ar, ac] = shapeOf('a', a);
    const [br, bc] = shapeOf('b', b);
    const [m, k] = transA ? [ac, ar] : [ar, ac];
    const [kb, n] = transB ? [bc, br] : [br, bc];
    if (kb !== k) throw new InvalidArgumentError('b', describeShape(b), `a tensor with ${k} ${transB ? 'columns' : 'rows'} (the inner dimension of a)`);
    const [y] = await this.#op([a, b], [[m, n]], ([y]) => matmulInto(writeView(y), readView(a), readView(b), m, n, k, transA, transB));
    return y;
  }

  async addBias(x: Tensor, bias: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    checkShape('bias', bias, [1, n]);
    const [y] = await this.#op([x, bias], [[m, n]], ([y]) => addBiasInto(writeView(y), readView(x), readView(bias), n));
    return y;
  }

  async add(a: Tensor, b: Tensor): Promise<Tensor> {
    const shape = shapeOf('a', a);
    checkShape('b', b, shape);
    const [y] = await this.#op([a, b], [shape], ([y]) => addInto(writeView(y), readView(a), readView(b)));
    return y;
  }

  async scale(x: Tensor, s: number): Promise<Tensor> {
    const shape = shapeOf('x', x);
    if (!Number.isFinite(s)) throw new InvalidArgumentError('s', s, 'a finite number');
    const [y] = await this.#op([x], [shape], ([y]) => scaleInto(writeView(y), readView(x), s));
    return y;
  }

  async sumRows(x: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    const [y] = await this.#op([x], [[1, n]], ([y]) => sumRowsInto(writeView(y), readView(x), m, n));
    return y;
  }

  async relu(x: Tensor): Promise<Tensor> {
    const shape = shapeOf('x', x);
    const [y] = await this.#op([x], [shape], ([y]) => reluInto(writeView(y), readView(x)));
    return y;
  }

  async reluBackward(dy: Tensor, x: Tensor): Promise<Tensor> {
    const shape = shapeOf('dy', dy);
    checkShape('x', x, shape);
    const [dx] = await this.#op([dy, x], [shape], ([dx]) => reluBackwardInto(writeView(dx), readView(dy), readView(x)));
    return dx;
  }

  async softmax(x: Tensor, causal = false): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    if (causal && m !== n) throw new InvalidArgumentError('x', describeShape(x), 'square for a causal softmax');
    const [y] = await this.#op([x], [[m, n]], ([y]) => softmaxInto(writeView(y), readView(x), m, n, causal));
    return y;
  }

  async softmaxBackward(dy: Tensor, y: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('y', y, [m, n]);
    const [dx] = await this.#op([dy, y], [[m, n]], ([dx]) => softmaxBackwardInto(writeView(dx), readView(dy), readView(y), m, n));
    return dx;
  }

  async layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Promise<{ y: Tensor; mean: Tensor; rstd: Tensor }> {
    const [m, n] = shapeOf('x', x);
    checkShape('gamma', gamma, [1, n]);
    checkShape('beta', beta, [1, n]);
    if (!(eps > 0)) throw new InvalidArgumentError('eps', eps, 'a positive number');
    const [y, mean, rstd] = await this.#op([x, gamma, beta], [[m, n], [m, 1], [m, 1]], ([y, mean, rstd]) =>
      layerNormInto(writeView(y), writeView(mean), writeView(rstd), readView(x), readView(gamma), readView(beta), m, n, eps),
    );
    return { y, mean, rstd };
  }

  async layerNormBackward(
    dy: Tensor,
    x: Tensor,
    mean: Tensor,
    rstd: Tensor,
    gamma: Tensor,
  ): Promise<{ dx: Tensor; dgamma: Tensor; dbeta: Tensor }> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('x', x, [m, n]);
    checkShape('mean', mean, [m, 1]);
    checkShape('rstd', rstd, [m, 1]);
    checkShape('gamma', gamma, [1, n]);
    const [dx, dgamma, dbeta] = await this.#op([dy, x, mean, rstd, gamma], [[m, n], [1, n], [1, n]], ([dx, dgamma, dbeta]) =>
      layerNormBackwardInto(writeView(dx), writeView(dgamma), writeView(dbeta), readView(dy), readView(x), readView(mean), readView(rstd), readView(gamma), m, n),
    );
    return { dx, dgamma, dbeta };
  }

  async mseLoss(pred: Tensor, target: Tensor): Promise<{ loss: Tensor; grad: Tensor }> {
    const shape = shapeOf('pred', pred);
    checkShape('target', target, shape);
    const [loss, grad] = await this.#op([pred, target], [[1, 1], shape], ([loss, grad]) => mseLossInto(writeView(loss), writeView(grad), readView(pred), readView(target)));
    return { loss, grad };
  }

  async sgdStep(param: Tensor, grad: Tensor, lr: number): Promise<void> {
    const shape = shapeOf('param', param);
    checkShape('grad', grad, shape);
    if (!Number.isFinite(lr)) throw new InvalidArgumentError('lr', lr, 'a finite number');
    await this.#op([param, grad], [], () => {
      const G = readView(grad);
      sgdStepInPlace(writeView(param), G, lr);
    });
  }

  async finish(): Promise<void> {}

  /**
   * Runs one op (Note [Pin before allocating]): pins `inputs`, allocates one tensor per shape, pins those, runs
   * `kernel`, unpins, calls afterOp and returns the outputs. Releases the outputs when anything, afterOp included, throws.
   */
  async #op<const S extends readonly Shape[]>(inputs: readonly Tensor[], shapes: S, kernel: (outputs: Outputs<S>) => void): Promise<Outputs<S>> {
    const outputs: Tensor[] = [];
    try {
      await this.#pinAndRun(inputs, shapes, outputs, () => kernel(outputs as Outputs<S>));
      this.#afterOp?.();
    } catch (error) {
      for (const output of outputs) output.storage.release();
      throw error;
    }
    return outputs as Outputs<S>;
  }

  /** Pins `inputs`, pushes one new tensor per shape onto `outputs`, pins those (if any), runs `kernel`, unpins all. */
  async #pinAndRun(inputs: readonly Tensor[], shapes: readonly Shape[], outputs: Tensor[], kernel: () => void): Promise<void> {
    using _pinnedInputs = await this.#pin(...inputs);
    for (const [rows, cols] of shapes) outputs.push(this.#runtime.tensor([rows, cols], { dtype: 'float32' }));
    using _pinnedOutputs = outputs.length === 0 ? null : await this.#pin(...outputs);
    kernel();
  }
}

/** x's elements for reading; valid only while x is pinned and only until the op's kernel returns. */
function readView(x: Tensor): Float32Array {
  const bytes = hostBytes(x.data());
  return new Float32Array(bytes.buffer, bytes.byteOffset + x.byteOffset, x.numel);
}

/** x's elements for writing; valid only while x is pinned and only until the op's kernel returns. */
function writeView(x: Tensor): Float32Array {
  const bytes = hostBytes(x.mutableData());
  return new Float32Array(bytes.buffer, bytes.byteOffset + x.byteOffset, x.numel);
}
