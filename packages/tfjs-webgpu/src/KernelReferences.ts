// Note [A failing kernel leaves nothing behind]: Stowage's allocation is synchronous, so a kernel that cannot get
// its output's memory (OutOfMemoryError from `uploadToGPU`, under a budget) throws from inside tfjs's kernel code,
// which never disposes what it made so far: tfjs's kernels hold intermediates as plain TensorInfos (the batched
// matmul's reshaped inputs, each a reference to its input's data, a `fill`'s output), not as engine tensors a
// `tidy` would dispose. Each such reference would keep its storage alive until the backend is removed, beyond the
// reach of `emptyCache()`. So the backend keeps (KernelReferences), per kernel depth (the engine's `kernelDepth`), the references to
// tensor data the running kernel's own code took (`write`/`makeTensorInfo`, `incRef`) and gave back (`disposeData`,
// `decRef`): the engine calls `numDataIds()` as each kernel starts, which opens that depth's count, and a call at a
// shallower depth closes the deeper ones (those kernels returned; their outputs are the engine's). When
// `runWebGPUProgram` throws, every open count's references still held are given back (the kernels at every open
// depth are unwinding: tfjs's kernels catch nothing), the failing kernel's pins end, and storages released under
// them are released. The references a kernel took to data of engine tensors it made itself are the engine's to
// dispose (`tidy`), and are not counted: the engine records them at the depth that made them, not the kernel's.

/**
 * The references to tensor data that the code of each running kernel took and has not given back, per open kernel
 * depth (index 0: the outermost kernel); Note [A failing kernel leaves nothing behind].
 */
export class KernelReferences<Id> {
  #open: Map<Id, number>[] = [];

  /** A kernel starts at `depth` (the engine's kernelDepth, ≥ 1): the kernels deeper than its caller have returned. */
  kernelStarted(depth: number): void {
    if (depth <= 0) return;
    this.#keep(depth - 1);
    this.#open.push(new Map());
  }

  /** The kernel running at `depth` took (`delta` 1) or gave back a reference to `id`; nothing outside a kernel. */
  count(depth: number, id: Id, delta: number): void {
    this.#keep(depth);
    const refs = this.#open[depth - 1];
    if (refs === undefined) return;
    const held = Math.max(0, (refs.get(id) ?? 0) + delta);
    if (held === 0) refs.delete(id);
    else refs.set(id, held);
  }

  /** Every open kernel is unwinding: the references still held, innermost kernel first; the counts are cleared. */
  unwind(): [Id, number][] {
    const open = this.#open;
    this.#open = [];
    return open.reverse().flatMap((refs) => [...refs]);
  }

  /** Keeps the counts of the kernels open at `depth` and above; a new count for each depth up to it. */
  #keep(depth: number): void {
    if (this.#open.length > depth) this.#open.length = depth;
    while (this.#open.length < depth) this.#open.push(new Map());
  }
}
