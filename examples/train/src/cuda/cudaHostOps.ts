import type { Runtime } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
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
} from '../hostMath.js';
import { noPin } from '../noPin.js';
import type { Ops, PinScope, Tensor } from '../Ops.js';
import type { Shape } from '../shapes.js';
import { describeShape, shapeChecks } from '../shapes.js';

// The training ops over CUDA storages, computed on the host (Note [Host compute on CUDA]).
//
// - Every op runs as: pin its inputs, allocate its outputs, pin those, copy the inputs to the host through the
//   runtime's read path (a synchronous cuMemcpyDtoH on the default stream), compute with hostMath.ts's loops, copy
//   the outputs back through the write path (cuMemcpyHtoD), unpin, call afterOp (Note [Pin before allocating] in
//   cpuOps.ts for the order).
// - The pin is `@stowage/lms`'s `pinAsync`, as on WebGPU: a storage whose page-out is still on the pager's stream
//   comes back once its bytes have reached the host, instead of the pin throwing.
// - The arithmetic is the CPU reference's, on the same float32 values: the same inputs give the same bits as
//   cpuOps.ts.
// - A failed op releases the outputs it allocated; sgdStep, the one op that writes an input, writes it last.

// Note [Host compute on CUDA]: what these ops test is the memory system, not arithmetic. Every tensor lives in
// device memory from the CUDA allocator; under LMS it is paged out to pinned host memory on the pager's stream and
// back, and every byte an op uses reaches it through the driver (cuMemcpyDtoH/HtoD at the storage's device
// address). Only the compute step runs on the host, because the machines CI runs on have no GPU: the stand-in
// libcuda they use implements memory calls and copies but cannot launch kernels. With a real GPU, a kernel
// library (cuBLAS, or kernels launched on the allocator's stream) would replace the compute step and the two copies
// around it; pinning, allocation order and the budget probe would stay as they are.

/** A tensor's [rows, cols]. */
const { shapeOf, checkShape } = shapeChecks('cuda');

/** One host array per output shape. */
type HostOutputs<S extends readonly Shape[]> = { -readonly [I in keyof S]: Float32Array };
/** The outputs of an op with output shapes S, one tensor per shape. */
type Outputs<S extends readonly Shape[]> = { -readonly [I in keyof S]: Tensor };

export interface CudaHostOpsOptions {
  /** Pins an op's storages while it copies and computes; `noPin` (a guard that does nothing) when absent. */
  readonly pin?: PinScope;
  /** Called after every op that succeeded, once its guards were disposed (a memory probe, say). */
  readonly afterOp?: () => void;
}

/**
 * The training ops on the runtime's `cuda` allocator, computed on the host (Note [Host compute on CUDA]). Tensors
 * must be contiguous float32 [rows, cols] tensors of that allocator; outputs are made with
 * `runtime.tensor([rows, cols], { dtype: 'float32', device: 'cuda' })` and belong to the caller. Every op throws
 * InvalidArgumentError for a tensor of another dtype, rank, layout or device, or for mismatched shapes.
 * @throws BackendUnavailableError when the runtime has no `cuda` plugin, or its driver cannot be used
 */
export function createCudaHostOps(runtime: Runtime, options: CudaHostOpsOptions = {}): Ops {
  runtime.allocator('cuda'); // fails now, rather than at the first op, without a usable driver
  return new CudaHostOps(runtime, options.pin ?? noPin, options.afterOp);
}

class CudaHostOps implements Ops {
  readonly device = 'cuda';
  readonly #runtime: Runtime;
  readonly #pin: PinScope;
  readonly #afterOp: (() => void) | undefined;

  constructor(runtime: Runtime, pin: PinScope, afterOp: (() => void) | undefined) {
    this.#runtime = runtime;
    this.#pin = pin;
    this.#afterOp = afterOp;
  }

  async fromArray(rows: number, cols: number, values: Float32Array): Promise<Tensor> {
    if (!(values instanceof Float32Array) || values.length !== rows * cols) {
      throw new InvalidArgumentError('values', values, `a Float32Array of rows * cols = ${rows * cols} values`);
    }
    const [y] = await this.#op([], [[rows, cols]], (_, [Y]) => Y.set(values));
    return y;
  }

  async toArray(x: Tensor): Promise<Float32Array> {
    shapeOf('x', x);
    let values: Float32Array;
    {
      using _pinned = await this.#pin(x);
      values = await this.#read(x);
    }
    this.#afterOp?.();
    return values;
  }

  async matmul(a: Tensor, b: Tensor, transA = false, transB = false): Promise<Tensor> {
    const [ar, ac] = shapeOf('a', a);
    const [br, bc] = shapeOf('b', b);
    const [m, k] = transA ? [ac, ar] : [ar, ac];
    const [kb, n] = transB ? [bc, br] : [br, bc];
    if (kb !== k) throw new InvalidArgumentError('b', describeShape(b), `a tensor with ${k} ${transB ? 'columns' : 'rows'} (the inner dimension of a)`);
    const [y] = await this.#op([a, b], [[m, n]], ([A, B], [Y]) => matmulInto(Y, A!, B!, m, n, k, transA, transB));
    return y;
  }

  async addBias(x: Tensor, bias: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    checkShape('bias', bias, [1, n]);
    const [y] = await this.#op([x, bias], [[m, n]], ([X, B], [Y]) => addBiasInto(Y, X!, B!, n));
    return y;
  }

  async add(a: Tensor, b: Tensor): Promise<Tensor> {
    const shape = shapeOf('a', a);
    checkShape('b', b, shape);
    const [y] = await this.#op([a, b], [shape], ([A, B], [Y]) => addInto(Y, A!, B!));
    return y;
  }

  async scale(x: Tensor, s: number): Promise<Tensor> {
    const shape = shapeOf('x', x);
    if (!Number.isFinite(s)) throw new InvalidArgumentError('s', s, 'a finite number');
    const [y] = await this.#op([x], [shape], ([X], [Y]) => scaleInto(Y, X!, s));
    return y;
  }

  async sumRows(x: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    const [y] = await this.#op([x], [[1, n]], ([X], [Y]) => sumRowsInto(Y, X!, m, n));
    return y;
  }

  async relu(x: Tensor): Promise<Tensor> {
    const shape = shapeOf('x', x);
    const [y] = await this.#op([x], [shape], ([X], [Y]) => reluInto(Y, X!));
    return y;
  }

  async reluBackward(dy: Tensor, x: Tensor): Promise<Tensor> {
    const shape = shapeOf('dy', dy);
    checkShape('x', x, shape);
    const [dx] = await this.#op([dy, x], [shape], ([DY, X], [DX]) => reluBackwardInto(DX, DY!, X!));
    return dx;
  }

  async softmax(x: Tensor, causal = false): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    if (causal && m !== n) throw new InvalidArgumentError('x', describeShape(x), 'square for a causal softmax');
    const [y] = await this.#op([x], [[m, n]], ([X], [Y]) => softmaxInto(Y, X!, m, n, causal));
    return y;
  }

  async softmaxBackward(dy: Tensor, y: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('y', y, [m, n]);
    const [dx] = await this.#op([dy, y], [[m, n]], ([DY, Y], [DX]) => softmaxBackwardInto(DX, DY!, Y!, m, n));
    return dx;
  }

  async layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Promise<{ y: Tensor; mean: Tensor; rstd: Tensor }> {
    const [m, n] = shapeOf('x', x);
    checkShape('gamma', gamma, [1, n]);
    checkShape('beta', beta, [1, n]);
    if (!(eps > 0)) throw new InvalidArgumentError('eps', eps, 'a positive number');
    const [y, mean, rstd] = await this.#op([x, gamma, beta], [[m, n], [m, 1], [m, 1]], ([X, G, B], [Y, MEAN, RSTD]) => layerNormInto(Y, MEAN, RSTD, X!, G!, B!, m, n, eps));
    return { y, mean, rstd };
  }

  async layerNormBackward(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, gamma: Tensor): Promise<{ dx: Tensor; dgamma: Tensor; dbeta: Tensor }> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('x', x, [m, n]);
    checkShape('mean', mean, [m, 1]);
    checkShape('rstd', rstd, [m, 1]);
    checkShape('gamma', gamma, [1, n]);
    const [dx, dgamma, dbeta] = await this.#op([dy, x, mean, rstd, gamma], [[m, n], [1, n], [1, n]], ([DY, X, MEAN, RSTD, G], [DX, DGAMMA, DBETA]) =>
      layerNormBackwardInto(DX, DGAMMA, DBETA, DY!, X!, MEAN!, RSTD!, G!, m, n),
    );
    return { dx, dgamma, dbeta };
  }

  async mseLoss(pred: Tensor, target: Tensor): Promise<{ loss: Tensor; grad: Tensor }> {
    const shape = shapeOf('pred', pred);
    checkShape('target', target, shape);
    const [loss, grad] = await this.#op([pred, target], [[1, 1], shape], ([P, T], [LOSS, GRAD]) => mseLossInto(LOSS, GRAD, P!, T!));
    return { loss, grad };
  }

  async sgdStep(param: Tensor, grad: Tensor, lr: number): Promise<void> {
    const shape = shapeOf('param', param);
    checkShape('grad', grad, shape);
    if (!Number.isFinite(lr)) throw new InvalidArgumentError('lr', lr, 'a finite number');
    await this.#op([param, grad], [], ([P, G]) => sgdStepInPlace(P!, G!, lr), [param]);
  }

  /** Every copy is synchronous on the default stream: once an op returned, its bytes are in place. */
  async finish(): Promise<void> {}

  /**
   * Runs one op (Note [Pin before allocating] in cpuOps.ts): pins `inputs`, allocates one tensor per shape, pins
   * those (if any), copies the inputs to host arrays, runs `compute` on them and one new array per output, copies
   * the outputs back, then each of `updated` (inputs that `compute` changed in place), unpins, calls afterOp and
   * returns the outputs. Releases the outputs when anything, afterOp included, throws.
   */
  async #op<const S extends readonly Shape[]>(
    inputs: readonly Tensor[],
    shapes: S,
    compute: (inputs: readonly Float32Array[], outputs: HostOutputs<S>) => void,
    updated: readonly Tensor[] = [],
  ): Promise<Outputs<S>> {
    const outputs: Tensor[] = [];
    try {
      await this.#pinAndRun(inputs, shapes, outputs, async () => {
        const hostInputs: Float32Array[] = [];
        for (const input of inputs) hostInputs.push(await this.#read(input));
        const hostOutputs = outputs.map((output) => new Float32Array(output.numel));
        compute(hostInputs, hostOutputs as HostOutputs<S>);
        for (const [i, output] of outputs.entries()) this.#write(output, hostOutputs[i]!);
        for (const input of updated) this.#write(input, hostInputs[inputs.indexOf(input)]!);
      });
      this.#afterOp?.();
    } catch (error) {
      for (const output of outputs) output.storage.release();
      throw error;
    }
    return outputs as Outputs<S>;
  }

  /** Pins `inputs`, pushes one new tensor per shape onto `outputs`, pins those (if any), runs `work`, unpins all. */
  async #pinAndRun(inputs: readonly Tensor[], shapes: readonly Shape[], outputs: Tensor[], work: () => Promise<void>): Promise<void> {
    using _pinnedInputs = await this.#pin(...inputs);
    for (const [rows, cols] of shapes) outputs.push(this.#runtime.tensor([rows, cols], { dtype: 'float32', device: 'cuda' }));
    using _pinnedOutputs = outputs.length === 0 ? null : await this.#pin(...outputs);
    await work();
  }

  /** A host copy of x's elements (x pinned: its bytes are resident on the device). */
  async #read(x: Tensor): Promise<Float32Array> {
    const bytes = await this.#runtime.read(x.storage);
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset + x.byteOffset, bytes.byteOffset + x.byteOffset + x.numel * 4));
  }

  /** Copies `values` into x's elements on the device (x pinned). */
  #write(x: Tensor, values: Float32Array): void {
    this.#runtime.write(x.storage, values, x.byteOffset);
  }
}
