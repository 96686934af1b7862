import type { Runtime } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { webGpuAllocatorOf } from './webGpuAllocatorOf.js';
import type { Ops, PinScope, Tensor } from '../Ops.js';
import { noPin } from '../noPin.js';
import type { Dispatch, KernelParams, Operand } from './KernelRunner.js';
import { KernelRunner, linearGrid } from './KernelRunner.js';
import type { KernelName } from './kernels.js';
import type { Shape } from '../shapes.js';
import { describeShape, shapeChecks } from '../shapes.js';

// The training ops on WebGPU: WGSL compute kernels (kernels.ts) over tensors of the runtime's WebGPU allocator.
//
// - Every op runs as: pin its inputs, allocate its outputs (and temporaries), pin those, take the pointers, record
//   and submit its dispatches (KernelRunner#run), unpin, release the temporaries, call afterOp. Pinning the inputs
//   before allocating keeps LMS from paging them out to make room for the outputs (Note [Pin before allocating] in
//   cpuOps.ts).
// - The work is submitted before the guards are disposed: Stowage's WebGPU allocator reuses an unpinned or freed
//   block only for work submitted after it (Note [Submit epochs] in @stowage/allocator-webgpu), so no later op can
//   overwrite an operand before this op's kernels ran.
// - Ops return once their work is submitted, not done; `toArray` and `finish` wait for the queue.
// - Each kernel writes every output element from one invocation, summing in a fixed order: the same inputs give
//   the same bits on every run. Sums are float32 (the CPU ops sum in float64), so the two agree within rounding.
// - A failed op releases the outputs it allocated and leaves its inputs unchanged.

/** A tensor's [rows, cols]. */
const { shapeOf, checkShape } = shapeChecks('webgpu');

/** The outputs of an op with output shapes S, one tensor per shape. */
type Outputs<S extends readonly Shape[]> = { -readonly [I in keyof S]: Tensor };

export interface WebGpuOpsOptions {
  /** The GPUDevice of the runtime's `webgpu` allocator: the kernels run on its queue. */
  readonly gpu: GPUDevice;
  /** Pins an op's storages while its work is recorded and submitted; `noPin` (a guard that does nothing) when absent. */
  readonly pin?: PinScope;
  /** Called after every op that succeeded, once its guards were disposed (a memory probe, say). */
  readonly afterOp?: () => void;
}

/**
 * The training ops on the runtime's WebGPU allocator. Tensors must be contiguous float32 [rows, cols] tensors of
 * that allocator; outputs are made with `runtime.tensor([rows, cols], { dtype: 'float32', device: 'webgpu' })` and
 * belong to the caller. Every op throws InvalidArgumentError for a tensor of another dtype, rank, layout or device,
 * or for mismatched shapes.
 * @throws InvalidArgumentError when the runtime's `webgpu` allocator is not a WebGpuAllocator on `options.gpu`;
 * BackendUnavailableError when the runtime has no `webgpu` plugin
 */
export function createWebGpuOps(runtime: Runtime, options: WebGpuOpsOptions): Ops {
  const allocator = webGpuAllocatorOf(runtime.allocator('webgpu'));
  if (allocator === undefined || allocator.backend.gpuDevice !== options.gpu) {
    throw new InvalidArgumentError('options.gpu', options.gpu, "the GPUDevice of the runtime's webgpu allocator (a WebGpuAllocator, or adaptors over one: the kernels bind its buffers)");
  }
  return new WebGpuOps(runtime, options.gpu, options.pin ?? noPin, options.afterOp);
}

class WebGpuOps implements Ops {
  readonly device = 'webgpu';
  readonly #runtime: Runtime;
  readonly #gpu: GPUDevice;
  readonly #runner: KernelRunner;
  readonly #pin: PinScope;
  readonly #afterOp: (() => void) | undefined;

  constructor(runtime: Runtime, gpu: GPUDevice, pin: PinScope, afterOp: (() => void) | undefined) {
    this.#runtime = runtime;
    this.#gpu = gpu;
    this.#runner = KernelRunner.forDevice(gpu);
    this.#pin = pin;
    this.#afterOp = afterOp;
  }

  async fromArray(rows: number, cols: number, values: Float32Array): Promise<Tensor> {
    if (!(values instanceof Float32Array) || values.length !== rows * cols) {
      throw new InvalidArgumentError('values', values, `a Float32Array of rows * cols = ${rows * cols} values`);
    }
    const [y] = await this.#op([], [[rows, cols]], ([y]) => this.#runtime.write(y.storage, values, y.byteOffset));
    return y;
  }

  async toArray(x: Tensor): Promise<Float32Array> {
    shapeOf('x', x);
    let bytes: Uint8Array;
    {
      // Pinned until the bytes arrived: a page-out must not overtake the read.
      using _pinned = await this.#pin(x);
      bytes = await this.#runtime.read(x.storage);
    }
    this.#afterOp?.();
    return new Float32Array(bytes.slice(x.byteOffset, x.byteOffset + x.numel * 4).buffer);
  }

  async matmul(a: Tensor, b: Tensor, transA = false, transB = false): Promise<Tensor> {
    const [ar, ac] = shapeOf('a', a);
    const [br, bc] = shapeOf('b', b);
    const [m, k] = transA ? [ac, ar] : [ar, ac];
    const [kb, n] = transB ? [bc, br] : [br, bc];
    if (kb !== k) throw new InvalidArgumentError('b', describeShape(b), `a tensor with ${k} ${transB ? 'columns' : 'rows'} (the inner dimension of a)`);
    const grid = linearGrid(m * n);
    const flags = (transA ? 1 : 0) | (transB ? 2 : 0);
    const [y] = await this.#op([a, b], [[m, n]], ([y]) => [dispatch('matmul', [read(a), read(b), write(y)], { m, n, k, flags }, grid)]);
    return y;
  }

  async addBias(x: Tensor, bias: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    checkShape('bias', bias, [1, n]);
    const [y] = await this.#op([x, bias], [[m, n]], ([y]) => [dispatch('addBias', [read(x), read(bias), write(y)], { m, n }, linearGrid(m * n))]);
    return y;
  }

  async add(a: Tensor, b: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('a', a);
    checkShape('b', b, [m, n]);
    const [y] = await this.#op([a, b], [[m, n]], ([y]) => [dispatch('add', [read(a), read(b), write(y)], { m, n }, linearGrid(m * n))]);
    return y;
  }

  async scale(x: Tensor, s: number): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    if (!Number.isFinite(s)) throw new InvalidArgumentError('s', s, 'a finite number');
    const [y] = await this.#op([x], [[m, n]], ([y]) => [dispatch('scale', [read(x), write(y)], { m, n, s0: s }, linearGrid(m * n))]);
    return y;
  }

  async sumRows(x: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    const [y] = await this.#op([x], [[1, n]], ([y]) => [dispatch('sumRows', [read(x), write(y)], { m, n }, linearGrid(n))]);
    return y;
  }

  async relu(x: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    const [y] = await this.#op([x], [[m, n]], ([y]) => [dispatch('relu', [read(x), write(y)], { m, n }, linearGrid(m * n))]);
    return y;
  }

  async reluBackward(dy: Tensor, x: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('x', x, [m, n]);
    const [dx] = await this.#op([dy, x], [[m, n]], ([dx]) => [dispatch('reluBackward', [read(dy), read(x), write(dx)], { m, n }, linearGrid(m * n))]);
    return dx;
  }

  async softmax(x: Tensor, causal = false): Promise<Tensor> {
    const [m, n] = shapeOf('x', x);
    if (causal && m !== n) throw new InvalidArgumentError('x', describeShape(x), 'square for a causal softmax');
    const [y] = await this.#op([x], [[m, n]], ([y]) => [dispatch('softmax', [read(x), write(y)], { m, n, flags: causal ? 1 : 0 }, linearGrid(m))]);
    return y;
  }

  async softmaxBackward(dy: Tensor, y: Tensor): Promise<Tensor> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('y', y, [m, n]);
    const [dx] = await this.#op([dy, y], [[m, n]], ([dx]) => [dispatch('softmaxBackward', [read(dy), read(y), write(dx)], { m, n }, linearGrid(m))]);
    return dx;
  }

  async layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Promise<{ y: Tensor; mean: Tensor; rstd: Tensor }> {
    const [m, n] = shapeOf('x', x);
    checkShape('gamma', gamma, [1, n]);
    checkShape('beta', beta, [1, n]);
    if (!(eps > 0)) throw new InvalidArgumentError('eps', eps, 'a positive number');
    const [y, mean, rstd] = await this.#op([x, gamma, beta], [[m, n], [m, 1], [m, 1]], ([y, mean, rstd]) => [
      dispatch('layerNorm', [read(x), read(gamma), read(beta), write(y), write(mean), write(rstd)], { m, n, s0: eps }, linearGrid(m)),
    ]);
    return { y, mean, rstd };
  }

  async layerNormBackward(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, gamma: Tensor): Promise<{ dx: Tensor; dgamma: Tensor; dbeta: Tensor }> {
    const [m, n] = shapeOf('dy', dy);
    checkShape('x', x, [m, n]);
    checkShape('mean', mean, [m, 1]);
    checkShape('rstd', rstd, [m, 1]);
    checkShape('gamma', gamma, [1, n]);
    const [dx, dgamma, dbeta] = await this.#op([dy, x, mean, rstd, gamma], [[m, n], [1, n], [1, n]], ([dx, dgamma, dbeta]) => [
      dispatch('layerNormBackward', [read(dy), read(x), read(mean), read(rstd), read(gamma), write(dx)], { m, n }, linearGrid(m)),
      dispatch('layerNormParamGrads', [read(dy), read(x), read(mean), read(rstd), write(dgamma), write(dbeta)], { m, n }, linearGrid(n)),
    ]);
    return { dx, dgamma, dbeta };
  }

  async mseLoss(pred: Tensor, target: Tensor): Promise<{ loss: Tensor; grad: Tensor }> {
    const [m, n] = shapeOf('pred', pred);
    checkShape('target', target, [m, n]);
    const k = m * n;
    const [loss, grad] = await this.#op(
      [pred, target],
      [[1, 1], [m, n]],
      ([loss, grad], [rowSquares]) => [
        dispatch('mseRows', [read(pred), read(target), write(grad), write(rowSquares!)], { m, n, k }, linearGrid(m)),
        dispatch('mseTotal', [read(rowSquares!), write(loss)], { m, k }, linearGrid(1)),
      ],
      [[m, 1]],
    );
    return { loss, grad };
  }

  async sgdStep(param: Tensor, grad: Tensor, lr: number): Promise<void> {
    const [m, n] = shapeOf('param', param);
    checkShape('grad', grad, [m, n]);
    if (!Number.isFinite(lr)) throw new InvalidArgumentError('lr', lr, 'a finite number');
    await this.#op([param, grad], [], () => [dispatch('sgdStep', [write(param), read(grad)], { m, n, s0: lr }, linearGrid(m * n))]);
  }

  async finish(): Promise<void> {
    // An empty submit first: it runs the copies the allocator batched (runtime.write) before the wait.
    this.#gpu.queue.submit([]);
    await this.#gpu.queue.onSubmittedWorkDone();
  }

  /**
   * Runs one op: pins `inputs`, allocates one tensor per shape in `shapes` and `temporaryShapes`, pins those (if
   * any), records and submits what `record` returns (or just runs it, when it returns nothing), unpins, releases
   * the temporaries, calls afterOp and returns the outputs. Releases everything it allocated when anything, afterOp
   * included, throws.
   */
  async #op<const S extends readonly Shape[]>(
    inputs: readonly Tensor[],
    shapes: S,
    record: (outputs: Outputs<S>, temporaries: readonly Tensor[]) => readonly Dispatch[] | void,
    temporaryShapes: readonly Shape[] = [],
  ): Promise<Outputs<S>> {
    const made: Tensor[] = [];
    const outputs = (): Outputs<S> => made.slice(0, shapes.length) as Outputs<S>;
    try {
      await this.#pinAndRun(inputs, [...shapes, ...temporaryShapes], made, () => {
        const dispatches = record(outputs(), made.slice(shapes.length));
        if (dispatches) this.#runner.run(dispatches);
      });
      // Unpinned now, and the work that reads them is submitted: the allocator reuses their blocks only for later work.
      for (const temporary of made.slice(shapes.length)) temporary.storage.release();
      this.#afterOp?.();
    } catch (error) {
      for (const tensor of made) if (!tensor.storage.isReleased) tensor.storage.release();
      throw error;
    }
    return outputs();
  }

  /** Pins `inputs`, pushes one new tensor per shape onto `made`, pins those (if any), runs `work`, unpins all. */
  async #pinAndRun(inputs: readonly Tensor[], shapes: readonly Shape[], made: Tensor[], work: () => void): Promise<void> {
    using _pinnedInputs = await this.#pin(...inputs);
    for (const [rows, cols] of shapes) made.push(this.#runtime.tensor([rows, cols], { dtype: 'float32', device: 'webgpu' }));
    using _pinnedOutputs = made.length === 0 ? null : await this.#pin(...made);
    work();
  }
}

function dispatch(kernel: KernelName, operands: readonly Operand[], params: KernelParams, grid: readonly [number, number]): Dispatch {
  return { kernel, operands, params, grid };
}

function read(tensor: Tensor): Operand {
  return { tensor, access: 'read' };
}

function write(tensor: Tensor): Operand {
  return { tensor, access: 'write' };
}


