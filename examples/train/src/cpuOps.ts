import type { Runtime } from '@stowage/core';
import { hostBytes, InvalidArgumentError } from '@stowage/core';
import type { Ops, PinScope, Tensor } from './Ops.js';
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
// - Sums run in float64 in a fixed order (ascending index; products as in Note [Matmul order]), then round once to
//   float32, so the same inputs always give the same bits.
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
    const [y] = await this.#op([a, b], [[m, n]], ([y]) => {
      // Note [Matmul order]: rows of a against rows of bᵀ, each a dot product in a fixed order.
      const rowsA = transA ? transpose(readView(a), k, m) : readView(a);
      const rowsB = transB ? readView(b) : transpose(readView(b), k, n);
      const C = writeView(y);
      for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) C[i * n + j] = dot(rowsA, i * k, rowsB, j * k, k);
    });
    return y;
  }

  async addBias(x: Tensor, bias: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    checkShape('bias', bias, [1, n]);
    const [y] = await this.#op([x, bias], [[m, n]], ([y]) => {
      const X = readView(x);
      const B = readView(bias);
      const Y = writeView(y);
      for (let i = 0; i < m * n; i++) Y[i] = X[i]! + B[i % n]!;
    });
    return y;
  }

  async add(a: Tensor, b: Tensor): Promise<Tensor> {
    const shape = shapeOf('a', a);
    checkShape('b', b, shape);
    const [y] = await this.#op([a, b], [shape], ([y]) => {
      const A = readView(a);
      const B = readView(b);
      const Y = writeView(y);
      for (let i = 0; i < Y.length; i++) Y[i] = A[i]! + B[i]!;
    });
    return y;
  }

  async scale(x: Tensor, s: number): Promise<Tensor> {
    const shape = shapeOf('x', x);
    if (!Number.isFinite(s)) throw new InvalidArgumentError('s', s, 'a finite number');
    const [y] = await this.#op([x], [shape], ([y]) => {
      const X = readView(x);
      const Y = writeView(y);
      for (let i = 0; i < Y.length; i++) Y[i] = X[i]! * s;
    });
    return y;
  }

  async sumRows(x: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    const [y] = await this.#op([x], [[1, n]], ([y]) => {
      const X = readView(x);
      const sums = new Float64Array(n);
      for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) sums[j] = sums[j]! + X[i * n + j]!;
      writeView(y).set(sums);
    });
    return y;
  }

  async relu(x: Tensor): Promise<Tensor> {
    const shape = shapeOf('x', x);
    const [y] = await this.#op([x], [shape], ([y]) => {
      const X = readView(x);
      const Y = writeView(y);
      for (let i = 0; i < Y.length; i++) Y[i] = X[i]! > 0 ? X[i]! : 0;
    });
    return y;
  }

  async reluBackward(dy: Tensor, x: Tensor): Promise<Tensor> {
    const shape = shapeOf('dy', dy);
    checkShape('x', x, shape);
    const [dx] = await this.#op([dy, x], [shape], ([dx]) => {
      const DY = readView(dy);
      const X = readView(x);
      const DX = writeView(dx);
      for (let i = 0; i < DX.length; i++) DX[i] = X[i]! > 0 ? DY[i]! : 0;
    });
    return dx;
  }

  async softmax(x: Tensor, causal = false): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    if (causal && m !== n) throw new InvalidArgumentError('x', describeShape(x), 'square for a causal softmax');
    const [y] = await this.#op([x], [[m, n]], ([y]) => {
      const X = readView(x);
      const Y = writeView(y);
      const e = new Float64Array(n);
      for (let i = 0; i < m; i++) {
        const width = causal ? i + 1 : n;
        const base = i * n;
        let max = -Infinity;
        for (let j = 0; j < width; j++) max = Math.max(max, X[base + j]!);
        let sum = 0;
        for (let j = 0; j < width; j++) {
          e[j] = Math.exp(X[base + j]! - max);
          sum += e[j]!;
        }
        for (let j = 0; j < n; j++) Y[base + j] = j < width ? e[j]! / sum : 0;
      }
    });
    return y;
  }

  async softmaxBackward(dy: Tensor, y: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('y', y, [m, n]);
    const [dx] = await this.#op([dy, y], [[m, n]], ([dx]) => {
      const DY = readView(dy);
      const Y = readView(y);
      const DX = writeView(dx);
      for (let i = 0; i < m; i++) {
        const base = i * n;
        let dot = 0;
        for (let j = 0; j < n; j++) dot += DY[base + j]! * Y[base + j]!;
        for (let j = 0; j < n; j++) DX[base + j] = Y[base + j]! * (DY[base + j]! - dot);
      }
    });
    return dx;
  }

  async layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Promise<{ y: Tensor; mean: Tensor; rstd: Tensor }> {
    const [m, n] = shapeOf('x', x);
    checkShape('gamma', gamma, [1, n]);
    checkShape('beta', beta, [1, n]);
    if (!(eps > 0)) throw new InvalidArgumentError('eps', eps, 'a positive number');
    const [y, mean, rstd] = await this.#op([x, gamma, beta], [[m, n], [m, 1], [m, 1]], ([y, mean, rstd]) => {
      const X = readView(x);
      const G = readView(gamma);
      const B = readView(beta);
      const Y = writeView(y);
      const MEAN = writeView(mean);
      const RSTD = writeView(rstd);
      for (let i = 0; i < m; i++) {
        const base = i * n;
        let sum = 0;
        for (let j = 0; j < n; j++) sum += X[base + j]!;
        const mu = sum / n;
        let squares = 0;
        for (let j = 0; j < n; j++) squares += (X[base + j]! - mu) ** 2;
        const r = 1 / Math.sqrt(squares / n + eps);
        for (let j = 0; j < n; j++) Y[base + j] = (X[base + j]! - mu) * r * G[j]! + B[j]!;
        MEAN[i] = mu;
        RSTD[i] = r;
      }
    });
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
    const [dx, dgamma, dbeta] = await this.#op([dy, x, mean, rstd, gamma], [[m, n], [1, n], [1, n]], ([dx, dgamma, dbeta]) => {
      const DY = readView(dy);
      const X = readView(x);
      const MEAN = readView(mean);
      const RSTD = readView(rstd);
      const G = readView(gamma);
      const DX = writeView(dx);
      const dg = new Float64Array(n);
      const db = new Float64Array(n);
      for (let i = 0; i < m; i++) {
        const base = i * n;
        const mu = MEAN[i]!;
        const r = RSTD[i]!;
        // dx = r * (g - mean(g) - xhat * mean(g * xhat)) where g = dy * gamma and xhat = (x - mu) * r.
        let sumG = 0;
        let sumGXhat = 0;
        for (let j = 0; j < n; j++) {
          const xhat = (X[base + j]! - mu) * r;
          const g = DY[base + j]! * G[j]!;
          sumG += g;
          sumGXhat += g * xhat;
          dg[j] = dg[j]! + DY[base + j]! * xhat;
          db[j] = db[j]! + DY[base + j]!;
        }
        const meanG = sumG / n;
        const meanGXhat = sumGXhat / n;
        for (let j = 0; j < n; j++) {
          const xhat = (X[base + j]! - mu) * r;
          DX[base + j] = r * (DY[base + j]! * G[j]! - meanG - xhat * meanGXhat);
        }
      }
      writeView(dgamma).set(dg);
      writeView(dbeta).set(db);
    });
    return { dx, dgamma, dbeta };
  }

  async mseLoss(pred: Tensor, target: Tensor): Promise<{ loss: Tensor; grad: Tensor }> {
    const shape = shapeOf('pred', pred);
    checkShape('target', target, shape);
    const [loss, grad] = await this.#op([pred, target], [[1, 1], shape], ([loss, grad]) => {
      const P = readView(pred);
      const T = readView(target);
      const G = writeView(grad);
      const count = P.length;
      let squares = 0;
      for (let i = 0; i < count; i++) {
        const diff = P[i]! - T[i]!;
        squares += diff * diff;
        G[i] = (2 * diff) / count;
      }
      writeView(loss)[0] = squares / count;
    });
    return { loss, grad };
  }

  async sgdStep(param: Tensor, grad: Tensor, lr: number): Promise<void> {
    const shape = shapeOf('param', param);
    checkShape('grad', grad, shape);
    if (!Number.isFinite(lr)) throw new InvalidArgumentError('lr', lr, 'a finite number');
    await this.#op([param, grad], [], () => {
      const G = readView(grad);
      const P = writeView(param);
      for (let i = 0; i < P.length; i++) P[i] = P[i]! - lr * G[i]!;
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

// Note [Matmul order]: a dot product's adds form one dependency chain, which bounds a plain loop at one add per
// floating-point latency. `dot` keeps four partial sums (over p ≡ 0, 1, 2, 3 mod 4), adds them as
// (s0 + s1) + (s2 + s3), then the tail: a fixed order, so the result depends only on the inputs, about twice as
// fast. Operands are first copied into row-major rows of a and columns of b (a transpose of whichever is stored
// the other way), so every product reads both operands contiguously.

/** Σ x[xAt + p] · y[yAt + p] for p < k, in float64, in the order of Note [Matmul order]. */
function dot(x: Float32Array, xAt: number, y: Float32Array, yAt: number, k: number): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let p = 0;
  for (; p + 4 <= k; p += 4) {
    s0 += x[xAt + p]! * y[yAt + p]!;
    s1 += x[xAt + p + 1]! * y[yAt + p + 1]!;
    s2 += x[xAt + p + 2]! * y[yAt + p + 2]!;
    s3 += x[xAt + p + 3]! * y[yAt + p + 3]!;
  }
  let sum = s0 + s1 + (s2 + s3);
  for (; p < k; p++) sum += x[xAt + p]! * y[yAt + p]!;
  return sum;
}

/** The transpose of a row-major [rows, cols] matrix, as a new row-major [cols, rows] array. */
function transpose(x: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j * rows + i] = x[i * cols + j]!;
  return t;
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
