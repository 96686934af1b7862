import type { Runtime } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { runHostKernel } from './hostKernels.js';
import { noPin } from './noPin.js';
import type { Ops, PinScope, Tensor } from './Ops.js';
import type { KernelCall, KernelOperands } from './TrainingOps.js';
import { TrainingOps } from './TrainingOps.js';

// The CPU reference implementation of Ops: plain loops over Float32Array views of host storages.
//
// - Every op runs as TrainingOps runs it: pin, allocate, pin, compute, unpin, afterOp (Note [Pin before allocating]
//   in TrainingOps.ts).
// - Float32Array views are taken only inside the compute step, after pinning, and never outlive it: under LMS an
//   unpinned storage may be paged out, and its DataPtr's bytes then belong to someone else.
// - Inputs are read through `data()`, outputs and sgdStep's parameter written through `mutableData()`.
// - The arithmetic is hostMath.ts's, on those views: sums in float64 in a fixed order, rounded once to float32, so
//   the same inputs always give the same bits.

export interface CpuOpsOptions {
  /** Pins an op's storages while it reads and writes them; `noPin` (a guard that does nothing) when absent. */
  readonly pin?: PinScope;
  /** Called after every op that succeeded, once its guard was disposed (a memory probe, say). */
  readonly afterOp?: () => void;
}

/**
 * The training ops on the runtime's CPU allocator. Tensors must be contiguous float32 [rows, cols] CPU tensors;
 * outputs are made with `runtime.tensor([rows, cols], { dtype: 'float32', device: 'cpu' })` and belong to the caller.
 * Every op throws InvalidArgumentError for a tensor of another dtype, rank or layout, or for mismatched shapes.
 */
export function createCpuOps(runtime: Runtime, options: CpuOpsOptions = {}): Ops {
  return new CpuOps(runtime, options.pin ?? noPin, options.afterOp);
}

class CpuOps extends TrainingOps {
  constructor(runtime: Runtime, pin: PinScope, afterOp: (() => void) | undefined) {
    super('cpu', runtime, pin, afterOp);
  }

  protected execute(call: KernelCall, { inputs, outputs }: KernelOperands): void {
    // sgdStep writes its first input, the parameter.
    const inputViews = inputs.map((x, i) => (i === 0 && call.kernel === 'sgdStep' ? writeView(x) : readView(x)));
    runHostKernel(call, inputViews, outputs.map(writeView));
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
