/**
 * A model's training (or inference) loop as LMS sees it, generated from the model's shapes: the tensors it makes
 * and the operations that use them, iteration by iteration. The bench (`pnpm bench:lms`) runs these on the
 * simulated-time device under LMS, and replays them offline (Belady-MIN) for the bytes a perfect schedule moves.
 *
 * Rules every trace keeps (the trace tests check them):
 * - Ids are unique within an iteration, persistent tensors included; an iteration's own tensors may reuse the ids of
 *   another iteration's (the driver maps ids to storages per iteration).
 * - A tensor is created by one op at most and used (read, updated) only after it is created; persistent tensors
 *   exist before the first iteration, are never created by an op and never freed.
 * - Every tensor an iteration creates is freed in that iteration, after its last use, by exactly one op.
 */

/** A tensor of a trace. */
export interface TraceTensor {
  readonly id: number;
  /** Bytes on the device. */
  readonly bytes: number;
  /** What it is, for reports: `block3.attn.scores`, `adam.m.fc1.weight`. */
  readonly name: string;
}

/** One operation (one kernel) of an iteration, in program order. */
export interface TraceOp {
  readonly name: string;
  /** Tensors it reads; each exists before it runs. */
  readonly reads: readonly number[];
  /** Tensors it creates: allocated before it runs, written by it, not paged in. */
  readonly creates: readonly number[];
  /** Existing tensors it writes in place (a weight update, an accumulated gradient); also read. */
  readonly updates: readonly number[];
  /** Tensors released once it has run. */
  readonly frees: readonly number[];
  /** Floating-point operations it does, for the compute-time model. */
  readonly flops: number;
  /** Bytes it reads and writes in device memory, for the compute-time model. */
  readonly bytesAccessed: number;
}

/** One iteration: the tensors it creates (all freed in it) and its ops. */
export interface IterationTrace {
  readonly tensors: readonly TraceTensor[];
  readonly ops: readonly TraceOp[];
}

/** A generated trace: a model's shapes, its persistent tensors, and each iteration. */
export interface ModelTrace {
  /** `mlp`, `transformer`, `unet`, `transformer-varying`, `optimizer`. */
  readonly name: string;
  /** The shapes it was generated from, as stated in its generator. */
  readonly shapes: Readonly<Record<string, number | string | readonly number[]>>;
  /** Tensors that live across iterations (weights, optimizer state): made before iteration 0, never freed. */
  readonly persistent: readonly TraceTensor[];
  /** Iteration `i` (0, 1, 2, …); the same `i` always gives the same iteration. */
  iteration(i: number): IterationTrace;
}
