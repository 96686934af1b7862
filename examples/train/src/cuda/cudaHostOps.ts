import type { Runtime } from '@stowage/core';
import { runHostKernel } from '../hostKernels.js';
import { noPin } from '../noPin.js';
import type { Ops, PinScope, Tensor } from '../Ops.js';
import type { KernelCall, KernelOperands } from '../TrainingOps.js';
import { TrainingOps } from '../TrainingOps.js';

// The training ops over CUDA storages, computed on the host (Note [Host compute on CUDA]).
//
// - Every op runs as TrainingOps runs it (Note [Pin before allocating] in TrainingOps.ts); its kernel copies the
//   inputs to the host through the runtime's read path (a synchronous cuMemcpyDtoH on the default stream), computes
//   with hostMath.ts's loops, and copies the outputs back through the write path (cuMemcpyHtoD).
// - The pin is `@stowage/lms`'s `pinAsync`, as on WebGPU: a storage whose page-out is still on the pager's stream
//   comes back once its bytes have reached the host, instead of the pin throwing.
// - The arithmetic is the CPU reference's, on the same float32 values: the same inputs give the same bits as
//   cpuOps.ts.
// - A failed op releases the outputs it allocated; sgdStep, the one op that writes an input, writes it back last.

// Note [Host compute on CUDA]: what these ops test is the memory system, not arithmetic. Every tensor lives in
// device memory from the CUDA allocator; under LMS it is paged out to pinned host memory on the pager's stream and
// back, and every byte an op uses reaches it through the driver (cuMemcpyDtoH/HtoD at the storage's device
// address). Only the compute step runs on the host, because the machines CI runs on have no GPU: the stand-in
// libcuda they use implements memory calls and copies but cannot launch kernels. With a real GPU, a kernel
// library (cuBLAS, or kernels launched on the allocator's stream) would replace the compute step and the two copies
// around it; pinning, allocation order and the budget probe would stay as they are.

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

class CudaHostOps extends TrainingOps {
  constructor(runtime: Runtime, pin: PinScope, afterOp: (() => void) | undefined) {
    super('cuda', runtime, pin, afterOp);
  }

  /** Every copy is synchronous on the default stream: once the kernel returned, its outputs are in place. */
  protected async execute(call: KernelCall, { inputs, outputs }: KernelOperands): Promise<void> {
    const hostInputs: Float32Array[] = [];
    for (const input of inputs) hostInputs.push(await this.#read(input));
    const hostOutputs = outputs.map((output) => new Float32Array(output.numel));
    runHostKernel(call, hostInputs, hostOutputs);
    for (const [i, output] of outputs.entries()) this.#write(output, hostOutputs[i]!);
    if (call.kernel === 'sgdStep') this.#write(inputs[0]!, hostInputs[0]!); // the parameter, updated in place
  }

  /** A host copy of x's elements (x pinned: its bytes are resident on the device). */
  async #read(x: Tensor): Promise<Float32Array> {
    const bytes = await this.runtime.read(x.storage);
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset + x.byteOffset, bytes.byteOffset + x.byteOffset + x.numel * 4));
  }

  /** Copies `values` into x's elements on the device (x pinned). */
  #write(x: Tensor, values: Float32Array): void {
    this.runtime.write(x.storage, values, x.byteOffset);
  }
}
