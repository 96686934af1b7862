import { InvalidArgumentError } from '@stowage/core';
import type { TensorImpl } from '@stowage/core';
import type { Device } from '@stowage/core';
import type { WebGpuBuffers } from '@stowage/allocator-webgpu';
import type { KernelName } from './kernels.js';
import { KERNELS, WORKGROUP } from './kernels.js';

// Records and submits the kernels of one op on one GPUDevice.
//
// - One runner per GPUDevice (`KernelRunner.forDevice`), shared by every ops object on it: each kernel's pipeline
//   is compiled on first use and kept for the device's lifetime.
// - `run(dispatches)` is synchronous: it takes the operands' pointers (`data()` for reads, `mutableData()` for
//   writes), writes the parameters, records every dispatch into one command encoder and submits it. Callers pin
//   the operands before and unpin after, so the allocator only reuses their blocks for later submits.
// - Every operand is bound read_write (Note [Read-write bindings]) from a binding offset the device accepts, with
//   its first element's index in the parameters (Note [Binding offsets]).
// - An operand whose range would overlap another binding of the dispatch (the same tensor twice, say) is bound
//   from a copy in the runner's scratch buffer (Note [Aliased operands]).
// - Parameters go in one uniform buffer per kernel and per use within a run (Note [Parameter buffers]).

// Note [Read-write bindings]: WebGPU checks storage usage per GPUBuffer, not per range. The tensors of one op are
// usually ranges of one large segment the allocator carved, and a dispatch that binds one range of a buffer as
// `read` storage and another as `read_write` storage fails validation (the buffer would be both read-only and
// writable storage in one usage scope). So every kernel declares every operand `var<storage, read_write>`, inputs
// included: any number of writable bindings of one buffer may share a dispatch, as long as their ranges do not
// overlap.

// Note [Binding offsets]: a binding's offset must be a multiple of minStorageBufferOffsetAlignment (256 bytes), but
// a tensor may start anywhere on a 4-byte boundary (an imported buffer's range, a view's storage offset). Each
// operand is bound from the aligned offset at or below its first element, and the kernel adds the element offset
// `off(i)` (in the parameters) to every index. Blocks the caching engine carves are 512-byte aligned, so for the
// ops' own tensors the offset is 0.

// Note [Aliased operands]: Dawn refuses a dispatch whose writable bindings overlap ("writable storage buffer binding
// aliasing"), and by Note [Read-write bindings] every binding is writable. Overlaps arise when an op gets the same
// tensor twice (`add(x, x)`, `matmul(x, x, true)`, `sgdStep(p, p, lr)`) or when a binding aligned down (Note
// [Binding offsets]) reaches into a neighbour's range. Outputs are bound first; an input that would overlap an
// earlier binding is copied (copyBufferToBuffer, recorded before the dispatch, so it sees the op's own earlier
// dispatches) into the runner's scratch buffer and bound from there, so the kernel reads the same values. Empty
// operands are bound to 4 scratch bytes (a binding cannot be empty). The scratch buffer is the runner's own (a copy
// cannot stay within one buffer, and segments are the allocator's): it grows to the largest run's need, is not
// counted against the allocator's budget, and is only used by ops that pass aliased tensors.

// Note [Parameter buffers]: `queue.writeBuffer` is ordered on the queue between submits, so a uniform buffer written
// before a run's submit is read by that run's dispatches and rewritten only after it. Within one run, each
// dispatch of a kernel needs its own buffer: the kernel keeps a list, and the n-th dispatch of the kernel in a run
// uses the n-th buffer (made on first need). A run is synchronous, so runs of several ops objects sharing a
// runner never interleave.

/** Bytes of a kernel's `Params` uniform (kernels.ts). */
const PARAMS_BYTES = 64;

/** Operands a kernel may have (two vec4 of element offsets). */
const MAX_OPERANDS = 8;

/** Workgroups per grid dimension the device must accept (WebGPU's default maxComputeWorkgroupsPerDimension). */
const MAX_GROUPS_PER_DIMENSION = 65_535;

/** GPUBufferUsage flags (spec values; the globals do not exist in Node). */
const UNIFORM = 0x0040;
const STORAGE = 0x0080;
const COPY_DST = 0x0008;

/** One tensor a dispatch binds: read (bound from `data()`) or written (bound from `mutableData()`). */
export interface Operand {
  readonly tensor: TensorImpl;
  readonly access: 'read' | 'write';
}

/** The values of a kernel's `Params` besides the operand offsets; absent ones are 0. */
export interface KernelParams {
  readonly m?: number;
  readonly n?: number;
  readonly k?: number;
  readonly flags?: number;
  readonly s0?: number;
}

/** One dispatch: a kernel, its operands in binding order, its parameters and its grid of workgroups. */
export interface Dispatch {
  readonly kernel: KernelName;
  readonly operands: readonly Operand[];
  readonly params: KernelParams;
  readonly grid: readonly [x: number, y: number];
}

/** A compiled kernel and its parameter buffers, the n-th for the n-th dispatch of the kernel in a run. */
interface CompiledKernel {
  readonly pipeline: GPUComputePipeline;
  readonly params: { readonly buffer: GPUBuffer; readonly bindGroup: GPUBindGroup }[];
}

/** Where one operand is bound: a range of its own buffer, or of the scratch buffer (with bytes to copy there). */
interface Placement {
  readonly buffer: GPUBuffer | 'scratch';
  /** Byte offset of the binding (aligned). */
  readonly offset: number;
  /** Bytes bound (a multiple of 4, at least 4). */
  readonly size: number;
  /** Index of the operand's first element in the binding. */
  readonly elementOffset: number;
  /** For a scratch placement of a non-empty input: the bytes to copy there first. */
  readonly copyFrom?: { readonly buffer: GPUBuffer; readonly offset: number };
}

/** The grid of WORKGROUP-wide workgroups that covers `invocations` (kernels.ts `flatId`). */
export function linearGrid(invocations: number): [x: number, y: number] {
  const groups = Math.ceil(invocations / WORKGROUP);
  if (groups === 0) return [0, 0];
  const x = Math.min(groups, MAX_GROUPS_PER_DIMENSION);
  const y = Math.ceil(groups / x);
  if (y > MAX_GROUPS_PER_DIMENSION) throw new InvalidArgumentError('invocations', invocations, `at most ${MAX_GROUPS_PER_DIMENSION ** 2 * WORKGROUP} for one dispatch`);
  return [x, y];
}

/**
 * Invariants: every pipeline in `#kernels` was made by `#device`; `#scratch` is undefined or a buffer of
 * `#scratchBytes` bytes with STORAGE | COPY_DST usage.
 */
export class KernelRunner {
  static readonly #byDevice = new WeakMap<GPUDevice, KernelRunner>();
  readonly #device: GPUDevice;
  readonly #kernels = new Map<KernelName, CompiledKernel>();
  /** minStorageBufferOffsetAlignment, in bytes. */
  readonly #alignment: number;
  #scratch: GPUBuffer | undefined;
  #scratchBytes = 0;

  private constructor(device: GPUDevice) {
    this.#device = device;
    this.#alignment = device.limits.minStorageBufferOffsetAlignment;
  }

  /** The runner of `device`, made on first use. */
  static forDevice(device: GPUDevice): KernelRunner {
    let runner = KernelRunner.#byDevice.get(device);
    if (!runner) KernelRunner.#byDevice.set(device, (runner = new KernelRunner(device)));
    return runner;
  }

  /**
   * Records `dispatches` in order into one command encoder and submits it. Precondition: every operand is pinned
   * (resident) until this returns; the caller may unpin right after, since the work is submitted. `buffersOf` is
   * the WebGpuBuffers device service of a tensor's device in the caller's runtime (it binds the operands).
   * @throws InvalidArgumentError for an operand whose allocator is not a WebGpuAllocator of this device, a tensor
   * that is not float32, two written operands that overlap, or more operands than a kernel can take
   */
  run(dispatches: readonly Dispatch[], buffersOf: (device: Device) => WebGpuBuffers | undefined): void {
    const uses = new Map<KernelName, number>();
    let scratchBytes = 0;
    const planned = dispatches.map((dispatch) => {
      if (dispatch.operands.length > MAX_OPERANDS) throw new InvalidArgumentError('operands.length', dispatch.operands.length, `at most ${MAX_OPERANDS}`);
      const { placements, scratchEnd } = this.#place(dispatch.operands, scratchBytes, buffersOf);
      scratchBytes = scratchEnd;
      const use = uses.get(dispatch.kernel) ?? 0;
      uses.set(dispatch.kernel, use + 1);
      return { dispatch, placements, params: this.#paramsSlot(dispatch.kernel, use) };
    });
    const scratch = this.#scratchOf(scratchBytes);
    const encoder = this.#device.createCommandEncoder({ label: 'train ops' });
    for (const { dispatch, placements, params } of planned) {
      const kernel = this.#kernel(dispatch.kernel);
      this.#device.queue.writeBuffer(params.buffer, 0, paramsBytes(dispatch.params, placements));
      for (const placement of placements) {
        if (placement.copyFrom) encoder.copyBufferToBuffer(placement.copyFrom.buffer, placement.copyFrom.offset, scratch!, placement.offset, placement.size);
      }
      const bindGroup = this.#device.createBindGroup({
        label: dispatch.kernel,
        layout: kernel.pipeline.getBindGroupLayout(0),
        entries: placements.map((placement, binding) => ({
          binding,
          resource: { buffer: placement.buffer === 'scratch' ? scratch! : placement.buffer, offset: placement.offset, size: placement.size },
        })),
      });
      const pass = encoder.beginComputePass({ label: dispatch.kernel });
      pass.setPipeline(kernel.pipeline);
      pass.setBindGroup(0, bindGroup);
      pass.setBindGroup(1, params.bindGroup);
      const [x, y] = dispatch.grid;
      if (x > 0 && y > 0) pass.dispatchWorkgroups(x, y);
      pass.end();
    }
    this.#device.queue.submit([encoder.finish()]);
  }

  /**
   * Places a dispatch's operands (Notes [Binding offsets], [Aliased operands]): outputs first, then inputs, each
   * in its own buffer unless it would overlap a placement before it. Scratch placements take the bytes from
   * `scratchStart` to the returned `scratchEnd`. Takes each operand's pointer here, after the caller pinned it.
   */
  #place(operands: readonly Operand[], scratchStart: number, buffersOf: (device: Device) => WebGpuBuffers | undefined): { placements: Placement[]; scratchEnd: number } {
    const placements = new Array<Placement>(operands.length);
    let scratchEnd = scratchStart;
    const order = [...operands.keys()].sort((i, j) => Number(operands[i]!.access === 'read') - Number(operands[j]!.access === 'read'));
    for (const i of order) {
      const { tensor, access } = operands[i]!;
      if (tensor.dtype !== 'float32') throw new InvalidArgumentError(`operands[${i}].dtype`, tensor.dtype, "'float32'");
      const byteLength = tensor.numel * 4;
      if (byteLength === 0) {
        placements[i] = { buffer: 'scratch', offset: scratchEnd, size: 4, elementOffset: 0 };
        scratchEnd += this.#alignUp(4);
        continue;
      }
      const ptr = access === 'write' ? tensor.mutableData() : tensor.data();
      const allocator = buffersOf(tensor.device);
      if (allocator === undefined || allocator.backend.gpuDevice !== this.#device) {
        throw new InvalidArgumentError(`operands[${i}]`, `a tensor on ${tensor.device.type}:${tensor.device.index}`, "a tensor of a webgpu() device on this ops object's GPUDevice");
      }
      const binding = allocator.bindingOf(ptr);
      const start = binding.offset + tensor.byteOffset;
      const offset = start - (start % this.#alignment);
      const own: Placement = { buffer: binding.buffer, offset, size: start + byteLength - offset, elementOffset: (start - offset) / 4 };
      const clash = placements.find((other) => other !== undefined && other.buffer === own.buffer && other.offset < own.offset + own.size && own.offset < other.offset + other.size);
      if (clash === undefined) {
        placements[i] = own;
        continue;
      }
      if (access === 'write') throw new InvalidArgumentError(`operands[${i}]`, 'a written tensor overlapping another operand', 'a range no other operand of the dispatch binds');
      placements[i] = { buffer: 'scratch', offset: scratchEnd, size: byteLength, elementOffset: 0, copyFrom: { buffer: binding.buffer, offset: start } };
      scratchEnd += this.#alignUp(byteLength);
    }
    return { placements, scratchEnd };
  }

  /** The scratch buffer, grown to at least `bytes` (undefined while no run needed one). */
  #scratchOf(bytes: number): GPUBuffer | undefined {
    if (bytes > this.#scratchBytes) {
      // Work already submitted keeps using the old buffer; destroy takes effect once it is done.
      this.#scratch?.destroy();
      this.#scratchBytes = Math.max(bytes, 2 * this.#scratchBytes);
      this.#scratch = this.#device.createBuffer({ size: this.#scratchBytes, usage: STORAGE | COPY_DST, label: 'train ops scratch' });
    }
    return this.#scratch;
  }

  #alignUp(bytes: number): number {
    return Math.ceil(bytes / this.#alignment) * this.#alignment;
  }

  /** The `use`-th parameter buffer of `name` in a run (Note [Parameter buffers]), made on first need. */
  #paramsSlot(name: KernelName, use: number): CompiledKernel['params'][number] {
    const kernel = this.#kernel(name);
    while (kernel.params.length <= use) {
      const buffer = this.#device.createBuffer({ size: PARAMS_BYTES, usage: UNIFORM | COPY_DST, label: `${name} params ${kernel.params.length}` });
      kernel.params.push({ buffer, bindGroup: this.#device.createBindGroup({ layout: kernel.pipeline.getBindGroupLayout(1), entries: [{ binding: 0, resource: { buffer } }] }) });
    }
    return kernel.params[use]!;
  }

  /** The compiled kernel `name`, compiled on first use. */
  #kernel(name: KernelName): CompiledKernel {
    let kernel = this.#kernels.get(name);
    if (!kernel) {
      const module = this.#device.createShaderModule({ label: name, code: KERNELS[name] });
      const pipeline = this.#device.createComputePipeline({ label: name, layout: 'auto', compute: { module, entryPoint: 'main' } });
      this.#kernels.set(name, (kernel = { pipeline, params: [] }));
    }
    return kernel;
  }
}

/** A kernel's `Params` (kernels.ts): the operands' element offsets, then m, n, k, flags and s0. */
function paramsBytes(params: KernelParams, placements: readonly Placement[]): ArrayBuffer {
  const bytes = new ArrayBuffer(PARAMS_BYTES);
  const words = new Uint32Array(bytes);
  const floats = new Float32Array(bytes);
  placements.forEach((placement, i) => (words[i] = placement.elementOffset));
  words[8] = params.m ?? 0;
  words[9] = params.n ?? 0;
  words[10] = params.k ?? 0;
  words[11] = params.flags ?? 0;
  floats[12] = params.s0 ?? 0;
  return bytes;
}
