import type { Runtime } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import type { Ops, PinScope, Tensor } from './Ops.js';
import type { Shape } from './shapes.js';
import { describeShape, shapeChecks } from './shapes.js';

// What the training ops of every device share: the operands' checks, the output shapes, and the way an op runs.
//
// - Every op runs as: pin its inputs, allocate its outputs (and temporaries), pin those, run the device's kernel,
//   unpin, release the temporaries, call afterOp (Note [Pin before allocating]).
// - A failed op releases what it allocated and leaves its inputs unchanged.
// - What a device does is `execute`: the CPU computes on views of its host storages (cpuOps.ts), CUDA on host copies
//   of its device storages (cuda/cudaHostOps.ts), WebGPU records and submits WGSL dispatches (webgpu/webGpuOps.ts).

// Note [Pin before allocating]: allocating an op's outputs can make LMS reclaim (page out) inactive storages to meet
// the budget. An input pinned only after the outputs were allocated may have been the victim, and would then be
// paged straight back in. Pinning the inputs first makes them ineligible; the outputs are pinned as soon as they
// exist, before anything writes them.

/**
 * One kernel of the training ops, with its sizes and scalars: what a device's `execute` runs. Its inputs are the
 * op's inputs in the order of the Ops method's parameters, its outputs the op's results in the order they are
 * returned; sgdStep has no output and writes its first input (the parameter) in place.
 */
export type KernelCall =
  | { readonly kernel: 'matmul'; readonly m: number; readonly n: number; readonly k: number; readonly transA: boolean; readonly transB: boolean }
  | { readonly kernel: 'addBias' | 'add' | 'sumRows' | 'relu' | 'reluBackward' | 'softmaxBackward' | 'layerNormBackward' | 'mseLoss'; readonly m: number; readonly n: number }
  | { readonly kernel: 'scale'; readonly m: number; readonly n: number; readonly s: number }
  | { readonly kernel: 'softmax'; readonly m: number; readonly n: number; readonly causal: boolean }
  | { readonly kernel: 'layerNorm'; readonly m: number; readonly n: number; readonly eps: number }
  | { readonly kernel: 'sgdStep'; readonly m: number; readonly n: number; readonly lr: number };

/** The tensors of a running kernel: inputs (pinned), outputs and temporaries (allocated for it, pinned). */
export interface KernelOperands {
  readonly inputs: readonly Tensor[];
  readonly outputs: readonly Tensor[];
  readonly temporaries: readonly Tensor[];
}

/** The outputs of an op with output shapes S, one tensor per shape. */
type Outputs<S extends readonly Shape[]> = { -readonly [I in keyof S]: Tensor };

/**
 * The Ops of one device over the runtime's allocator for `deviceType`: the checks (every operand a contiguous
 * float32 [rows, cols] tensor on that device, shapes that agree, finite scalars: InvalidArgumentError otherwise),
 * the shapes of the results, pinning and the release of what a failed op allocated. A device supplies `execute`,
 * and `temporariesOf` and `finish` where it needs them.
 */
export abstract class TrainingOps implements Ops {
  readonly device: string;
  protected readonly runtime: Runtime;
  readonly #pin: PinScope;
  readonly #afterOp: (() => void) | undefined;
  readonly #checks: ReturnType<typeof shapeChecks>;

  protected constructor(deviceType: string, runtime: Runtime, pin: PinScope, afterOp: (() => void) | undefined) {
    this.device = deviceType;
    this.runtime = runtime;
    this.#pin = pin;
    this.#afterOp = afterOp;
    this.#checks = shapeChecks(deviceType);
  }

  /** Runs `call` over `operands`; returns once its outputs hold their values, or once the device has them queued. */
  protected abstract execute(call: KernelCall, operands: KernelOperands): void | Promise<void>;

  /** Tensors the device needs beside `call`'s outputs, allocated and pinned with them and released after it. */
  protected temporariesOf(_call: KernelCall): readonly Shape[] {
    return [];
  }

  /** Waits for the device's queued work; nothing to wait for unless the device says so. */
  async finish(): Promise<void> {}

  async fromArray(rows: number, cols: number, values: Float32Array): Promise<Tensor> {
    if (!(values instanceof Float32Array) || values.length !== rows * cols) {
      throw new InvalidArgumentError('values', values, `a Float32Array of rows * cols = ${rows * cols} values`);
    }
    const [y] = await this.#op([], [[rows, cols]], [], ([y]) => this.runtime.write(y.storage, values, y.byteOffset));
    return y;
  }

  async toArray(x: Tensor): Promise<Float32Array> {
    this.#shapeOf('x', x);
    let bytes: Uint8Array;
    {
      // Pinned until the bytes arrived: a page-out must not overtake the read.
      using _pinned = await this.#pin(x);
      bytes = await this.runtime.read(x.storage);
    }
    this.#afterOp?.();
    return new Float32Array(bytes.slice(x.byteOffset, x.byteOffset + x.numel * 4).buffer);
  }

  async matmul(a: Tensor, b: Tensor, transA = false, transB = false): Promise<Tensor> {
    const [ar, ac] = this.#shapeOf('a', a);
    const [br, bc] = this.#shapeOf('b', b);
    const [m, k] = transA ? [ac, ar] : [ar, ac];
    const [kb, n] = transB ? [bc, br] : [br, bc];
    if (kb !== k) throw new InvalidArgumentError('b', describeShape(b), `a tensor with ${k} ${transB ? 'columns' : 'rows'} (the inner dimension of a)`);
    const [y] = await this.#kernel({ kernel: 'matmul', m, n, k, transA, transB }, [a, b], [[m, n]]);
    return y;
  }

  async addBias(x: Tensor, bias: Tensor): Promise<Tensor> {
    const [m, n] = this.#shapeOf('x', x);
    this.#checkShape('bias', bias, [1, n]);
    const [y] = await this.#kernel({ kernel: 'addBias', m, n }, [x, bias], [[m, n]]);
    return y;
  }

  async add(a: Tensor, b: Tensor): Promise<Tensor> {
    const [m, n] = this.#shapeOf('a', a);
    this.#checkShape('b', b, [m, n]);
    const [y] = await this.#kernel({ kernel: 'add', m, n }, [a, b], [[m, n]]);
    return y;
  }

  async scale(x: Tensor, s: number): Promise<Tensor> {
    const [m, n] = this.#shapeOf('x', x);
    if (!Number.isFinite(s)) throw new InvalidArgumentError('s', s, 'a finite number');
    const [y] = await this.#kernel({ kernel: 'scale', m, n, s }, [x], [[m, n]]);
    return y;
  }

  async sumRows(x: Tensor): Promise<Tensor> {
    const [m, n] = this.#shapeOf('x', x);
    const [y] = await this.#kernel({ kernel: 'sumRows', m, n }, [x], [[1, n]]);
    return y;
  }

  async relu(x: Tensor): Promise<Tensor> {
    const [m, n] = this.#shapeOf('x', x);
    const [y] = await this.#kernel({ kernel: 'relu', m, n }, [x], [[m, n]]);
    return y;
  }

  async reluBackward(dy: Tensor, x: Tensor): Promise<Tensor> {
    const [m, n] = this.#shapeOf('dy', dy);
    this.#checkShape('x', x, [m, n]);
    const [dx] = await this.#kernel({ kernel: 'reluBackward', m, n }, [dy, x], [[m, n]]);
    return dx;
  }

  async softmax(x: Tensor, causal = false): Promise<Tensor> {
    const [m, n] = this.#shapeOf('x', x);
    if (causal && m !== n) throw new InvalidArgumentError('x', describeShape(x), 'square for a causal softmax');
    const [y] = await this.#kernel({ kernel: 'softmax', m, n, causal }, [x], [[m, n]]);
    return y;
  }

  async softmaxBackward(dy: Tensor, y: Tensor): Promise<Tensor> {
    const [m, n] = this.#shapeOf('dy', dy);
    this.#checkShape('y', y, [m, n]);
    const [dx] = await this.#kernel({ kernel: 'softmaxBackward', m, n }, [dy, y], [[m, n]]);
    return dx;
  }

  async layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Promise<{ y: Tensor; mean: Tensor; rstd: Tensor }> {
    const [m, n] = this.#shapeOf('x', x);
    this.#checkShape('gamma', gamma, [1, n]);
    this.#checkShape('beta', beta, [1, n]);
    if (!(eps > 0)) throw new InvalidArgumentError('eps', eps, 'a positive number');
    const [y, mean, rstd] = await this.#kernel({ kernel: 'layerNorm', m, n, eps }, [x, gamma, beta], [[m, n], [m, 1], [m, 1]]);
    return { y, mean, rstd };
  }

  async layerNormBackward(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, gamma: Tensor): Promise<{ dx: Tensor; dgamma: Tensor; dbeta: Tensor }> {
    const [m, n] = this.#shapeOf('dy', dy);
    this.#checkShape('x', x, [m, n]);
    this.#checkShape('mean', mean, [m, 1]);
    this.#checkShape('rstd', rstd, [m, 1]);
    this.#checkShape('gamma', gamma, [1, n]);
    const [dx, dgamma, dbeta] = await this.#kernel({ kernel: 'layerNormBackward', m, n }, [dy, x, mean, rstd, gamma], [[m, n], [1, n], [1, n]]);
    return { dx, dgamma, dbeta };
  }

  async mseLoss(pred: Tensor, target: Tensor): Promise<{ loss: Tensor; grad: Tensor }> {
    const [m, n] = this.#shapeOf('pred', pred);
    this.#checkShape('target', target, [m, n]);
    const [loss, grad] = await this.#kernel({ kernel: 'mseLoss', m, n }, [pred, target], [[1, 1], [m, n]]);
    return { loss, grad };
  }

  async sgdStep(param: Tensor, grad: Tensor, lr: number): Promise<void> {
    const [m, n] = this.#shapeOf('param', param);
    this.#checkShape('grad', grad, [m, n]);
    if (!Number.isFinite(lr)) throw new InvalidArgumentError('lr', lr, 'a finite number');
    await this.#kernel({ kernel: 'sgdStep', m, n, lr }, [param, grad], []);
  }

  #shapeOf(argument: string, x: Tensor): Shape {
    return this.#checks.shapeOf(argument, x);
  }

  #checkShape(argument: string, x: Tensor, shape: Shape): void {
    this.#checks.checkShape(argument, x, shape);
  }

  #kernel<const S extends readonly Shape[]>(call: KernelCall, inputs: readonly Tensor[], shapes: S): Promise<Outputs<S>> {
    return this.#op(inputs, shapes, this.temporariesOf(call), (outputs, temporaries) => this.execute(call, { inputs, outputs, temporaries }));
  }

  /**
   * Runs one op (Note [Pin before allocating]): pins `inputs`, allocates one tensor per shape of `shapes` and
   * `temporaryShapes`, pins those (if any), runs `work`, unpins, releases the temporaries, calls afterOp and returns
   * the outputs. Releases everything it allocated when anything, afterOp included, throws.
   */
  async #op<const S extends readonly Shape[]>(
    inputs: readonly Tensor[],
    shapes: S,
    temporaryShapes: readonly Shape[],
    work: (outputs: Outputs<S>, temporaries: readonly Tensor[]) => void | Promise<void>,
  ): Promise<Outputs<S>> {
    const made: Tensor[] = [];
    const outputs = (): Outputs<S> => made.slice(0, shapes.length) as Outputs<S>;
    try {
      {
        using _pinnedInputs = await this.#pin(...inputs);
        for (const [rows, cols] of [...shapes, ...temporaryShapes]) made.push(this.runtime.tensor([rows, cols], { dtype: 'float32', device: this.device }));
        using _pinnedOutputs = made.length === 0 ? null : await this.#pin(...made);
        await work(outputs(), made.slice(shapes.length));
      }
      // Unpinned now, and the work that reads them is done or submitted: the allocator reuses their blocks only for
      // later work.
      for (const temporary of made.slice(shapes.length)) temporary.storage.release();
      this.#afterOp?.();
    } catch (error) {
      for (const tensor of made) if (!tensor.storage.isReleased) tensor.storage.release();
      throw error;
    }
    return outputs();
  }
}
