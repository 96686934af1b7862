import { InvalidArgumentError } from '@stowage/core';
import type { IterationTrace, TraceTensor } from '@stowage/example-train';

// A lower bound on one iteration's time that holds for every schedule of its ops (issue 33's physical ceiling):
// what any swapping design could reach on the device, not what ours does. Note [The iteration's lower bound].
// - Ops run one after another on one compute engine, in program order, each for its kernel time; none is split.
// - Lower bounds on each op's start are propagated forward (lbStart, lbEnd = lbStart + kernel): an op starts after
//   the one before it ends, and after the copies that some cut of the sequence forces before it.
// - A page-out cut at op t: of the tensors written this iteration that are still needed (dirty and live), those
//   that cannot stay resident beside op t's pinned set within the capacity must have left before t starts, each
//   after the op that last wrote it ended.
// - A page-in cut (k, t): of the tensors that exist when op k ends and are used again by op t, those that cannot be
//   resident beside op k's pinned set must come in after k ends and before t starts.
// - Each copy direction is one link at its bandwidth; copies are counted as bytes / bandwidth (latency left out).
// - The same windows give lower bounds on the copy time that overlaps no kernel (chains of disjoint windows), from
//   which the hidden-share ceilings follow (`hiddenShareCeiling`).
// O(n × (pins + dirty tensors)) time for n ops, O(n + tensors) memory.

// Note [The iteration's lower bound]
// The model: ops 0 … n − 1 run in program order on one compute engine, op t for its kernel time c_t from S_t to
// E_t = S_t + c_t, none split, none recomputed; the iteration starts at 0 with every engine idle and ends at T when
// all its work has (no overlap with another iteration). A tensor occupies its bytes from the start of the operation
// that writes its device copy (its creating kernel, or a page-in) to the end of the last one that reads that copy
// (a kernel, or its page-out); at no instant do occupying tensors exceed the capacity M. An op's pins (reads,
// creates, updates) occupy while it runs. A tensor's contents live on the device or, after a page-out that started
// once its last write ended, on the host; a page-out (page-in) of b bytes keeps its direction busy b / bandwidth.
// Then, for every schedule:
// 1. S_t ≥ E_{t−1}: one compute engine.
// 2. Page-out cut at t. Let D be the tensors written this iteration before t (by ops < t) whose contents are still
//    needed (used by an op ≥ t, or persistent). At S_t the occupying set holds t's pins and at most M bytes, so at
//    least X = |D ∪ pins_t| − M bytes of D \ pins_t are not occupying: each was paged out, the copy starting after
//    its last writer w ended and ending by S_t. The tensors written by ops ≥ v carry at least X − (bytes of
//    D \ pins_t written before v) of them, all copied inside [E_v, S_t], so S_t ≥ E_v + that / bandwidth, for every
//    writer v. (Over all v this is the fluid single-engine bound with release times, which is exact for it.)
// 3. Page-in cut (k, t), k < t. Let N be the tensors that exist when op k ends (persistent, or created by ops ≤ k)
//    and are used by ops k+1 … t. At E_k the occupying set holds k's pins and at most M bytes, so at least
//    Y = |N ∪ pins_k| − M bytes of N are not occupying: each is paged in by a copy that starts after E_k and ends
//    before its use, by S_t: S_t ≥ E_k + Y / bandwidth. (Over all t this is the fluid bound with deadlines.) k = −1
//    is the iteration's start (time 0, nothing pinned).
// 4. T ≥ S_n where op n is the iteration's end (no pins): its page-out cut makes dirty persistent tensors that
//    cannot all stay leave before T.
// Applying 1–3 in op order with the lower bounds already found for E_v, E_k gives lower bounds on every S_t and on
// T, each the length of a chain of kernels and forced copies: `timeNs`. The directions run in parallel in this
// model; they serialize in the bound only where the chain passes through the kernels (a forward pass bound by its
// page-outs, then a backward pass bound by its page-ins).
// Unhidden copy time: a window of rule 2, [E_v, S_t], holds ≥ (its bytes) / bandwidth of page-out time and only the
// kernels v+1 … t−1, so at least the difference overlaps no kernel; a window of rule 3, [E_k, S_t], likewise with
// the kernels k+1 … t−1. Windows that do not overlap in time add up (a later one opens at E_v with v ≥ the earlier
// one's t): the longest chain of disjoint windows is a lower bound on each direction's copy time that overlaps no
// kernel (`unhiddenOutNs`, `unhiddenInNs`). A schedule whose page-outs take O ns hides at most O − unhiddenOutNs of
// them, and at most the kernels' time: `hiddenShareCeiling`.
// What the bound leaves out, each of which only makes real schedules slower: copy latency, the allocator's rounding
// and fragmentation, the room a page-in needs while the page-out that frees it is still running (both directions
// may use one room at once here), dirty tensors left resident by the previous iteration, and the host's waits.
// Hence it is a ceiling for any policy, not a prediction of one: where it is not reached, either the policy or the
// bound's looseness is the gap.

export interface IterationLowerBoundOptions {
  /** The device's capacity in bytes: at no instant do the tensors it holds take more. */
  readonly capacityBytes: number;
  /** Each op's kernel time in nanoseconds (non-negative whole numbers), in program order. */
  readonly kernelNs: readonly number[];
  /** The link's bytes per second device → host (page-outs). */
  readonly pageOutBytesPerSecond: number;
  /** The link's bytes per second host → device (page-ins). */
  readonly pageInBytesPerSecond: number;
}

/** Lower bounds on one iteration that every schedule meets (Note [The iteration's lower bound]); nanoseconds. */
export interface IterationLowerBound {
  /** No schedule runs the iteration in less. */
  readonly timeNs: number;
  /** The kernels' total: the compute bound alone. */
  readonly computeNs: number;
  /** Page-out copy time that overlaps no kernel, in every schedule. */
  readonly unhiddenOutNs: number;
  /** Page-in copy time that overlaps no kernel, in every schedule. */
  readonly unhiddenInNs: number;
  /** The most bytes one page-out cut forces off the device (max over t of X_t). */
  readonly cutOutBytes: number;
  /** The most bytes one page-in cut forces onto it (max over (k, t) of Y(k, t)). */
  readonly cutInBytes: number;
}

/**
 * Lower bounds on the time of `iteration` (with `persistent` existing before it and after it) on a device of
 * `capacityBytes` whose link moves each direction at its bandwidth, for any schedule that runs the ops in order,
 * whole, without recomputation and without overlapping another iteration (Note [The iteration's lower bound]).
 * @throws InvalidArgumentError for a capacity, bandwidth or kernel time that is not a whole number in range, a
 *   `kernelNs` of another length than the ops, an op that uses a tensor that is neither persistent nor created
 *   before it, or an op whose pinned tensors alone exceed the capacity (no schedule runs it)
 */
export function iterationLowerBound(persistent: readonly TraceTensor[], iteration: IterationTrace, options: IterationLowerBoundOptions): IterationLowerBound {
  const { capacityBytes, kernelNs, pageOutBytesPerSecond, pageInBytesPerSecond } = options;
  if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 0) throw new InvalidArgumentError('options.capacityBytes', capacityBytes, 'a non-negative whole number of bytes');
  for (const [key, value] of [
    ['pageOutBytesPerSecond', pageOutBytesPerSecond],
    ['pageInBytesPerSecond', pageInBytesPerSecond],
  ] as const) {
    if (!(Number.isFinite(value) && value > 0)) throw new InvalidArgumentError(`options.${key}`, value, 'a positive number of bytes per second');
  }
  const { ops } = iteration;
  const n = ops.length;
  if (!Array.isArray(kernelNs) || kernelNs.length !== n) throw new InvalidArgumentError('options.kernelNs', kernelNs, `an array of ${n} kernel times, one per op`);
  kernelNs.forEach((ns, t) => {
    if (!Number.isSafeInteger(ns) || ns < 0) throw new InvalidArgumentError(`options.kernelNs[${t}]`, ns, 'a non-negative whole number of nanoseconds');
  });

  const bytes = new Map<number, number>();
  for (const t of persistent) bytes.set(t.id, t.bytes);
  for (const t of iteration.tensors) bytes.set(t.id, t.bytes);
  const isPersistent = new Set(persistent.map((t) => t.id));
  const sizeOf = (ids: Iterable<number>): number => {
    let sum = 0;
    for (const id of ids) sum += bytes.get(id)!;
    return sum;
  };
  // Per op: what it pins (reads, creates, updates), what it needs the contents of (reads, updates), what it writes.
  const pins: Set<number>[] = [];
  const uses: number[][] = [];
  const writes: number[][] = [];
  const created = new Set<number>();
  /** The last op that pins each iteration tensor: after it the tensor is dead. */
  const lastPin = new Map<number, number>();
  for (const [t, op] of ops.entries()) {
    const creates = new Set(op.creates);
    for (const id of [...op.reads, ...op.updates]) {
      if (!bytes.has(id) || (!isPersistent.has(id) && !created.has(id))) throw new InvalidArgumentError('iteration', `op ${t} (${op.name})`, 'ops that use only persistent tensors and tensors created by an earlier op');
    }
    for (const id of creates) {
      if (!bytes.has(id)) throw new InvalidArgumentError('iteration', `op ${t} (${op.name})`, 'ops that create only tensors the iteration lists');
      created.add(id);
    }
    const pinned = new Set([...op.reads, ...op.creates, ...op.updates]);
    if (sizeOf(pinned) > capacityBytes) throw new InvalidArgumentError('options.capacityBytes', capacityBytes, `at least op ${t}'s pinned bytes (${sizeOf(pinned)}): no schedule runs it`);
    pins.push(pinned);
    uses.push([...new Set([...op.reads, ...op.updates])].filter((id) => !creates.has(id)));
    writes.push([...new Set([...op.creates, ...op.updates])]);
    for (const id of pinned) if (!isPersistent.has(id)) lastPin.set(id, t);
  }

  const outNs = (b: number): number => (b <= 0 ? 0 : Math.floor((b / pageOutBytesPerSecond) * 1e9));
  const inNs = (b: number): number => (b <= 0 ? 0 : Math.floor((b / pageInBytesPerSecond) * 1e9));
  /** pre[t] = kernels 0 … t − 1; the kernels a … b take pre[b + 1] − pre[a]. */
  const pre = new Float64Array(n + 1);
  for (let t = 0; t < n; t++) pre[t + 1] = pre[t]! + kernelNs[t]!;
  // Arrays indexed by op k + 1 for k = −1 … n − 1 (k = −1: the iteration's start, time 0).
  const lbEnd = new Float64Array(n + 1);
  /** inAcc[k + 1]: bytes of op k's pins and of the tensors existing when k ends that ops k+1 … t use. */
  const inAcc = new Float64Array(n + 1);
  /** Longest chains of disjoint forced windows ending by op t's start (page-out, page-in): unhidden time. */
  const chainOut = new Float64Array(n + 1);
  const chainIn = new Float64Array(n + 1);
  /** Dirty live tensors (written this iteration, needed later) → the last op that wrote them, in that op's order. */
  const dirty = new Map<number, number>();
  const prevPin = new Map<number, number>();
  let lbStart = 0;
  let cutOutBytes = 0;
  let cutInBytes = 0;
  for (let t = 0; t <= n; t++) {
    // t = n is the iteration's end: no pins, no uses; its start is the iteration's time.
    const pinned = t < n ? pins[t]! : new Set<number>();
    if (t > 0) {
      inAcc[t] = sizeOf(pins[t - 1]!);
      for (const id of writes[t - 1]!) {
        dirty.delete(id);
        dirty.set(id, t - 1);
      }
      for (const id of pins[t - 1]!) if (lastPin.get(id) === t - 1) dirty.delete(id);
    }
    let start = t > 0 ? lbEnd[t]! : 0; // lbEnd[t] is op t − 1's end
    let bestOut = 0;
    let bestIn = 0;

    // Page-in cuts (k, t) for k = −1 … t − 1.
    if (t < n) {
      for (const id of uses[t]!) {
        const p = prevPin.get(id) ?? -2; // a persistent tensor not pinned yet exists since the start
        const size = bytes.get(id)!;
        for (let k = p + 1; k <= t - 1; k++) inAcc[k + 1] = inAcc[k + 1]! + size;
      }
    }
    for (let k = -1; k <= t - 1; k++) {
      const need = inAcc[k + 1]! - capacityBytes;
      if (need <= 0) continue;
      if (need > cutInBytes) cutInBytes = need;
      const ns = inNs(need);
      start = Math.max(start, lbEnd[k + 1]! + ns);
      bestIn = Math.max(bestIn, (k < 0 ? 0 : chainIn[k]!) + ns - (pre[t]! - pre[k + 1]!));
    }

    // The page-out cut at t, its windows opening at each writer's end.
    let live = 0;
    for (const id of dirty.keys()) live += bytes.get(id)!;
    for (const id of pinned) if (!dirty.has(id)) live += bytes.get(id)!;
    const need = live - capacityBytes;
    if (need > 0) {
      if (need > cutOutBytes) cutOutBytes = need;
      let before = 0; // bytes of the dirty, unpinned tensors written before `writer`
      let writer = -1;
      let groupBytes = 0;
      const window = (): void => {
        const ns = outNs(need - before);
        start = Math.max(start, lbEnd[writer + 1]! + ns);
        bestOut = Math.max(bestOut, chainOut[writer]! + ns - (pre[t]! - pre[writer + 1]!));
      };
      for (const [id, w] of dirty) {
        if (pinned.has(id)) continue;
        if (w !== writer) {
          if (writer >= 0) window();
          before += groupBytes;
          groupBytes = 0;
          writer = w;
          if (need - before <= 0) break;
        }
        groupBytes += bytes.get(id)!;
      }
      if (writer >= 0 && need - before > 0) window();
    }

    if (t < n) {
      lbEnd[t + 1] = start + kernelNs[t]!;
      for (const id of pins[t]!) prevPin.set(id, t);
    }
    lbStart = start;
    chainOut[t] = Math.max(t > 0 ? chainOut[t - 1]! : 0, bestOut);
    chainIn[t] = Math.max(t > 0 ? chainIn[t - 1]! : 0, bestIn);
  }
  return { timeNs: Math.max(lbStart, pre[n]!), computeNs: pre[n]!, unhiddenOutNs: chainOut[n]!, unhiddenInNs: chainIn[n]!, cutOutBytes, cutInBytes };
}

/**
 * The most of `copyBusyNs` of copies in one direction that can overlap kernels, as a share: min(1, compute /
 * copy time) (issue 33's ceiling), lowered by the copy time no schedule hides (`unhiddenNs`). Null without copies.
 */
export function hiddenShareCeiling(copyBusyNs: number, computeNs: number, unhiddenNs: number): number | null {
  if (copyBusyNs <= 0) return null;
  return Math.max(0, Math.min(1, computeNs / copyBusyNs, 1 - unhiddenNs / copyBusyNs));
}
