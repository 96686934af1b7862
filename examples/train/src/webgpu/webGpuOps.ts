import type { Runtime } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';
import { WebGpuBuffers } from '@stowage/allocator-webgpu';
import type { Ops, PinScope, Tensor } from '../Ops.js';
import { noPin } from '../noPin.js';
import type { Dispatch, KernelParams, Operand } from './KernelRunner.js';
import { KernelRunner, linearGrid } from './KernelRunner.js';
import type { KernelName } from './kernels.js';
import type { Shape } from '../shapes.js';
import type { KernelCall, KernelOperands } from '../TrainingOps.js';
import { TrainingOps } from '../TrainingOps.js';

// The training ops on WebGPU: WGSL compute kernels (kernels.ts) over tensors of the runtime's WebGPU allocator.
//
// - Every op runs as TrainingOps runs it: pin its inputs, allocate its outputs (and temporaries), pin those, record
//   and submit its dispatches (KernelRunner#run), unpin, release the temporaries, call afterOp. Pinning the inputs
//   before allocating keeps LMS from paging them out to make room for the outputs (Note [Pin before allocating] in
//   TrainingOps.ts).
// - The work is submitted before the guards are disposed: Stowage's WebGPU allocator reuses an unpinned or freed
//   block only for work submitted after it (Note [Submit epochs] in @stowage/allocator-webgpu), so no later op can
//   overwrite an operand before this op's kernels ran.
// - Ops return once their work is submitted, not done; `toArray` and `finish` wait for the queue.
// - Each kernel writes every output element from one invocation, summing in a fixed order: the same inputs give
//   the same bits on every run. Sums are float32 (the CPU ops sum in float64), so the two agree within rounding.
// - A failed op releases the outputs it allocated and leaves its inputs unchanged.

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
  const allocator = runtime.service(WebGpuBuffers, 'webgpu');
  if (allocator === undefined || allocator.backend.gpuDevice !== options.gpu) {
    throw new InvalidArgumentError('options.gpu', options.gpu, "the GPUDevice of the runtime's webgpu allocator (a WebGpuAllocator, or adaptors over one: the kernels bind its buffers)");
  }
  return new WebGpuOps(runtime, options.gpu, options.pin ?? noPin, options.afterOp);
}

class WebGpuOps extends TrainingOps {
  readonly #gpu: GPUDevice;
  readonly #runner: KernelRunner;

  constructor(runtime: Runtime, gpu: GPUDevice, pin: PinScope, afterOp: (() => void) | undefined) {
    super('webgpu', runtime, pin, afterOp);
    this.#gpu = gpu;
    this.#runner = KernelRunner.forDevice(gpu);
  }

  override async finish(): Promise<void> {
    // An empty submit first: it runs the copies the allocator batched (runtime.write) before the wait.
    this.#gpu.queue.submit([]);
    await this.#gpu.queue.onSubmittedWorkDone();
  }

  /** mseLoss sums each row's squares into an [m, 1] temporary before the total. */
  protected override temporariesOf(call: KernelCall): readonly Shape[] {
    return call.kernel === 'mseLoss' ? [[call.m, 1]] : [];
  }

  /** Records and submits the call's dispatches; returns once they are submitted, not done. */
  protected execute(call: KernelCall, operands: KernelOperands): void {
    this.#runner.run(dispatchesOf(call, operands), (device) => this.runtime.service(WebGpuBuffers, device));
  }
}

/** The WGSL dispatches (kernels.ts) that run `call`. */
function dispatchesOf(call: KernelCall, { inputs, outputs, temporaries }: KernelOperands): Dispatch[] {
  const [a, b, c, d, e] = inputs;
  const [y, y1, y2] = outputs;
  const { m, n } = call;
  switch (call.kernel) {
    case 'matmul': {
      const flags = (call.transA ? 1 : 0) | (call.transB ? 2 : 0);
      return [dispatch('matmul', [read(a), read(b), write(y)], { m, n, k: call.k, flags }, linearGrid(m * n))];
    }
    case 'addBias':
    case 'add':
    case 'reluBackward':
      return [dispatch(call.kernel, [read(a), read(b), write(y)], { m, n }, linearGrid(m * n))];
    case 'scale':
      return [dispatch('scale', [read(a), write(y)], { m, n, s0: call.s }, linearGrid(m * n))];
    case 'sumRows':
      return [dispatch('sumRows', [read(a), write(y)], { m, n }, linearGrid(n))];
    case 'relu':
      return [dispatch('relu', [read(a), write(y)], { m, n }, linearGrid(m * n))];
    case 'softmax':
      return [dispatch('softmax', [read(a), write(y)], { m, n, flags: call.causal ? 1 : 0 }, linearGrid(m))];
    case 'softmaxBackward':
      return [dispatch('softmaxBackward', [read(a), read(b), write(y)], { m, n }, linearGrid(m))];
    case 'layerNorm':
      return [dispatch('layerNorm', [read(a), read(b), read(c), write(y), write(y1), write(y2)], { m, n, s0: call.eps }, linearGrid(m))];
    case 'layerNormBackward':
      return [
        dispatch('layerNormBackward', [read(a), read(b), read(c), read(d), read(e), write(y)], { m, n }, linearGrid(m)),
        dispatch('layerNormParamGrads', [read(a), read(b), read(c), read(d), write(y1), write(y2)], { m, n }, linearGrid(n)),
      ];
    case 'mseLoss': {
      const k = m * n;
      const [rowSquares] = temporaries;
      return [
        dispatch('mseRows', [read(a), read(b), write(y1), write(rowSquares)], { m, n, k }, linearGrid(m)),
        dispatch('mseTotal', [read(rowSquares), write(y)], { m, k }, linearGrid(1)),
      ];
    }
    case 'sgdStep':
      return [dispatch('sgdStep', [write(a), read(b)], { m, n, s0: call.lr }, linearGrid(m * n))];
  }
}

function dispatch(kernel: KernelName, operands: readonly Operand[], params: KernelParams, grid: readonly [number, number]): Dispatch {
  return { kernel, operands, params, grid };
}

function read(tensor: Tensor | undefined): Operand {
  return { tensor: tensor!, access: 'read' };
}

function write(tensor: Tensor | undefined): Operand {
  return { tensor: tensor!, access: 'write' };
}


