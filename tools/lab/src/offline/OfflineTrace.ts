/** Names a tensor within one `OfflineTrace` (a storage index, a recorder's key). */
export type OfflineTensorId = number | string;

/** A tensor of an offline trace: its id, unique in the trace, and its size. */
export interface OfflineTensor {
  readonly id: OfflineTensorId;
  /** Bytes the tensor takes on the device, and moves when paged out or in. */
  readonly bytes: number;
}

/**
 * One operation of an offline trace, in program order. Every list names tensors of `OfflineTrace.tensors`; a tensor
 * listed twice in one list counts once.
 */
export interface OfflineOp {
  /** The tensors the op uses: all of them are resident together while it runs (its inputs and outputs). */
  readonly pins: readonly OfflineTensorId[];
  /**
   * Tensors the op allocates, each by its first write: no copy of them exists before, so they are not paged in.
   * Each is also in `pins`, is created by one op at most, and is pinned by no earlier op. A tensor that no op
   * creates exists before the trace, in host memory only, with a valid host copy (a weight loaded from disk; a
   * storage that was reclaimed when the recorded iteration began).
   */
  readonly creates?: readonly OfflineTensorId[];
  /**
   * Tensors the op writes (besides those it creates, which count as written): their host copies become stale, so
   * the next eviction of each pages it out. Each is also in `pins`.
   */
  readonly writes?: readonly OfflineTensorId[];
  /**
   * Tensors released once the op has run: they leave the device and the host and are never paged out. No later
   * op may use one; a tensor is freed once at most.
   */
  readonly frees?: readonly OfflineTensorId[];
}

/** A program as the offline schedule sees it: its tensors and the operations that use them, in order. */
export interface OfflineTrace {
  readonly tensors: readonly OfflineTensor[];
  readonly ops: readonly OfflineOp[];
}
