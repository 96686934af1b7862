import { InvalidArgumentError } from '@stowage/core';
import type { OfflineTensorId, OfflineTrace } from './OfflineTrace.js';

/** One eviction of the offline schedule. */
export interface BeladyEviction {
  /** The op that needed the room (the eviction happens before it runs). */
  readonly op: number;
  readonly id: OfflineTensorId;
  /** Bytes copied out: the tensor's size, or 0 when its host copy was valid or it is never used again (dropped). */
  readonly pageOutBytes: number;
}

/** What the offline schedule moves over a whole trace. Invariant: bytesMoved == pageOutBytes + pageInBytes. */
export interface BeladyMinResult {
  /** False when some op pins more bytes than the budget: no schedule runs the trace, and nothing was replayed. */
  readonly fits: boolean;
  /** The first op whose pins alone exceed the budget; null when `fits`. */
  readonly overBudgetOp: number | null;
  readonly bytesMoved: number;
  /** Bytes copied from the device to the host by evictions. */
  readonly pageOutBytes: number;
  /** Bytes copied back to the device for ops that use a tensor that is not resident. */
  readonly pageInBytes: number;
  /** Every eviction, in order. */
  readonly evictions: readonly BeladyEviction[];
}

/**
 * The offline schedule with perfect knowledge of the future (Belady's MIN), replayed over `trace` under
 * `budgetBytes` of device memory. It is what the bench divides a policy's bytes moved by (lms-anchors §7, M4); see
 * Note [Farthest next use is a reference, not an optimum] for what that ratio means.
 *
 * - Ops run in order. Before op i runs, every tensor it pins is resident; nothing else is required to be.
 * - A tensor an op creates is allocated there: room is made, nothing is paged in. Any other tensor that is not
 *   resident is paged in (its bytes count in `pageInBytes`).
 * - Room is made on demand: while the resident bytes plus the bytes coming in exceed the budget, evict the resident
 *   tensor that op i does not pin whose next use is farthest away (never used again: infinitely far), ties going to
 *   the larger tensor, then to one whose eviction copies nothing, then to the one listed first in `trace.tensors`.
 * - An evicted tensor that is used again is paged out (its bytes count in `pageOutBytes`) unless its host copy is
 *   still valid; one that is never used again is dropped and costs nothing.
 * - A page-out or a page-in leaves a valid host copy; a write (or the creating write) makes it stale.
 * - A freed tensor leaves the device and the host after its op, without an eviction and without a page-out.
 * - Bytes only: no fragmentation, no alignment, no timing (when a copy starts is not modelled).
 * - O(total pins + evictions × resident tensors) time, O(tensors + total pins) memory.
 *
 * @param budgetBytes the device bytes the trace's tensors may take at once: a non-negative whole number
 * @returns `fits: false` with nothing moved when an op pins more than `budgetBytes`
 * @throws InvalidArgumentError when `trace` is not an OfflineTrace (naming `trace` or its first bad part), the budget
 *   is not a non-negative whole number, or the trace breaks a rule of
 *   `OfflineTrace`/`OfflineOp` (unknown or duplicate ids, sizes that are not whole bytes, a create or write that is
 *   not pinned, a tensor created twice or used before its creation, freed twice or used after its free)
 */
export function beladyMin(trace: OfflineTrace, budgetBytes: number): BeladyMinResult {
  checkTraceShape(trace);
  if (!isWholeBytes(budgetBytes)) throw new InvalidArgumentError('budgetBytes', budgetBytes, 'a non-negative whole number of bytes');
  const ops = indexTrace(trace);
  const overBudgetOp = ops.findIndex((op) => sumBytes(op.pins) > budgetBytes);
  if (overBudgetOp >= 0) return { fits: false, overBudgetOp, bytesMoved: 0, pageOutBytes: 0, pageInBytes: 0, evictions: [] };

  // Invariant: residentBytes == Σ bytes over `resident`, and ≤ budgetBytes once an op's room is made.
  const resident = new Set<TensorState>();
  let residentBytes = 0;
  let pageOutBytes = 0;
  let pageInBytes = 0;
  const evictions: BeladyEviction[] = [];
  ops.forEach((op, i) => {
    const incoming = [...op.pins].filter((t) => !resident.has(t));
    const incomingBytes = sumBytes(incoming);
    while (residentBytes + incomingBytes > budgetBytes) {
      // A victim exists: the pinned bytes fit the budget, so the excess is held by tensors op i does not pin.
      const victim = chooseVictim(resident, op.pins);
      const cost = pageOutCost(victim);
      victim.hostCopy = isUsedAgain(victim);
      resident.delete(victim);
      residentBytes -= victim.bytes;
      pageOutBytes += cost;
      evictions.push({ op: i, id: victim.id, pageOutBytes: cost });
    }
    for (const t of incoming) {
      // Not created here, so it was created earlier or before the trace: it has a valid host copy (evictions keep one
      // for every tensor used again).
      if (!op.creates.has(t)) pageInBytes += t.bytes;
      resident.add(t);
      residentBytes += t.bytes;
    }
    for (const t of op.creates) t.hostCopy = false;
    for (const t of op.writes) t.hostCopy = false;
    for (const t of op.pins) t.nextUse += 1;
    for (const t of op.frees) {
      if (resident.delete(t)) residentBytes -= t.bytes;
      t.hostCopy = false;
    }
  });
  return { fits: true, overBudgetOp: null, bytesMoved: pageOutBytes + pageInBytes, pageOutBytes, pageInBytes, evictions };
}

// Note [Farthest next use is a reference, not an optimum]
//
// For tensors of one size that are never written, evicting the one used farthest in the future minimises page-ins:
// that is Belady's MIN, provably optimal. Neither condition holds for the traces LMS pages:
// - Sizes vary. Offline caching with variable sizes ("general caching") is NP-hard, with the cost counted in bytes
//   and even in faults (general knowledge: Albers, Arora and Khanna, SODA 1999, [S44] in reference/lms-anchors.md,
//   give approximations; Chrobak et al., "Caching is hard, even in the fault model", 2012). Farthest next use can
//   evict several tensors needed late where one needed sooner would have made room on its own (the test "keeps
//   evicting by farthest next use even where one nearer tensor alone would make room" is such a trace), so here it
//   is a heuristic.
// - Writes make evictions cost different amounts (a clean tensor is dropped, a written one is copied out), and the
//   victim order weighs that cost only in a tiebreak, so even at one size the sum of page-outs and page-ins is not
//   minimised.
// So the bench's "bytes moved / Belady-MIN" (lms-anchors §7, M4) is a ratio to a strong, fast reference, not to an
// optimum, and a policy may score below 1.0. What bounds every policy from below is the peak excess (lms-anchors
// §5); the exact optimum would take an ILP, feasible on small traces only.

/** A tensor during the replay. */
interface TensorState {
  readonly id: OfflineTensorId;
  readonly bytes: number;
  /** Its index in `trace.tensors`: the last tiebreak, for a deterministic schedule. */
  readonly order: number;
  /** The ops that pin it, ascending. */
  readonly uses: number[];
  /** The index in `uses` of its first use not yet run. */
  nextUse: number;
  /** The op that creates it; null for a tensor that exists before the trace. */
  createdAt: number | null;
  /** The op after which it is freed; null while it lives. */
  freedAt: number | null;
  /** True while a valid host copy exists (from the start, for a tensor no op creates): evicting it copies nothing. */
  hostCopy: boolean;
}

/** An op with its ids resolved and deduplicated. */
interface IndexedOp {
  readonly pins: ReadonlySet<TensorState>;
  readonly creates: ReadonlySet<TensorState>;
  readonly writes: ReadonlySet<TensorState>;
  readonly frees: ReadonlySet<TensorState>;
}

/** The op that next uses `t`, Infinity when none does. */
function nextUseOp(t: TensorState): number {
  return t.uses[t.nextUse] ?? Number.POSITIVE_INFINITY;
}

function isUsedAgain(t: TensorState): boolean {
  return t.nextUse < t.uses.length;
}

/** The resident tensor that is not pinned and that MIN evicts first (see `beladyMin`'s summary for the order). */
function chooseVictim(resident: ReadonlySet<TensorState>, pins: ReadonlySet<TensorState>): TensorState {
  let best: TensorState | undefined;
  for (const t of resident) {
    if (pins.has(t)) continue;
    if (best === undefined || evictsBefore(t, best)) best = t;
  }
  if (best === undefined) throw new Error('beladyMin: no unpinned resident tensor to evict although the op fits the budget');
  return best;
}

/** Farther next use first; then the larger; then the one whose eviction copies nothing; then the one listed first. */
function evictsBefore(a: TensorState, b: TensorState): boolean {
  const nextA = nextUseOp(a);
  const nextB = nextUseOp(b);
  if (nextA !== nextB) return nextA > nextB;
  if (a.bytes !== b.bytes) return a.bytes > b.bytes;
  const costA = pageOutCost(a);
  const costB = pageOutCost(b);
  if (costA !== costB) return costA < costB;
  return a.order < b.order;
}

/** The bytes evicting `t` copies out: none when it is never used again (dropped) or its host copy is valid. */
function pageOutCost(t: TensorState): number {
  return isUsedAgain(t) && !t.hostCopy ? t.bytes : 0;
}

function sumBytes(tensors: Iterable<TensorState>): number {
  let bytes = 0;
  for (const t of tensors) bytes += t.bytes;
  return bytes;
}

function isWholeBytes(value: number): boolean {
  return Number.isSafeInteger(value) && value >= 0;
}

/** Resolves every id of the trace, records each tensor's uses, and checks the rules of `OfflineTrace`. */
/**
 * Checks the outline of `trace` (an object with arrays `tensors` and `ops`, each item an object) before anything reads
 * it. @throws InvalidArgumentError naming the first part that is not
 */
function checkTraceShape(trace: OfflineTrace): void {
  const expected = 'an OfflineTrace: { tensors: { id, bytes }[], ops: OfflineOp[] } (OfflineTraceRecorder#trace makes one)';
  if (typeof trace !== 'object' || trace === null || Array.isArray(trace)) throw new InvalidArgumentError('trace', trace, expected);
  for (const key of ['tensors', 'ops'] as const) {
    const items: unknown = trace[key];
    if (!Array.isArray(items)) throw new InvalidArgumentError(`trace.${key}`, items, `an array (${expected})`);
    items.forEach((item, i) => {
      if (typeof item !== 'object' || item === null) throw new InvalidArgumentError(`trace.${key}[${i}]`, item, key === 'tensors' ? 'an object { id, bytes }' : 'an OfflineOp object { pins, creates?, writes?, frees? }');
    });
  }
  trace.ops.forEach((op, i) => {
    for (const key of ['pins', 'creates', 'writes', 'frees'] as const) {
      const ids: unknown = op[key];
      if (ids !== undefined && !Array.isArray(ids)) throw new InvalidArgumentError(`trace.ops[${i}].${key}`, ids, 'an array of tensor ids, or absent');
    }
  });
}

function indexTrace(trace: OfflineTrace): IndexedOp[] {
  const byId = new Map<OfflineTensorId, TensorState>();
  trace.tensors.forEach(({ id, bytes }, order) => {
    if (byId.has(id)) throw new InvalidArgumentError(`trace.tensors[${order}].id`, id, 'unique in trace.tensors');
    if (!isWholeBytes(bytes)) throw new InvalidArgumentError(`trace.tensors[${order}].bytes`, bytes, 'a non-negative whole number of bytes');
    byId.set(id, { id, bytes, order, uses: [], nextUse: 0, createdAt: null, freedAt: null, hostCopy: true });
  });
  const resolve = (ids: readonly OfflineTensorId[] | undefined, where: string): Set<TensorState> => {
    const tensors = new Set<TensorState>();
    (ids ?? []).forEach((id, k) => {
      const t = byId.get(id);
      if (t === undefined) throw new InvalidArgumentError(`${where}[${k}]`, id, 'a tensor listed in trace.tensors');
      tensors.add(t);
    });
    return tensors;
  };
  const createdBy = new Set<TensorState>();
  trace.ops.forEach((op, i) => {
    for (const t of resolve(op.creates, `trace.ops[${i}].creates`)) createdBy.add(t);
  });
  return trace.ops.map((op, i) => {
    const where = `trace.ops[${i}]`;
    const pins = resolve(op.pins, `${where}.pins`);
    const creates = resolve(op.creates, `${where}.creates`);
    const writes = resolve(op.writes, `${where}.writes`);
    const frees = resolve(op.frees, `${where}.frees`);
    for (const t of pins) {
      if (t.freedAt !== null) throw new InvalidArgumentError(`${where}.pins`, t.id, `a tensor not freed by an earlier op (freed after op ${t.freedAt})`);
      if (createdBy.has(t) && t.createdAt === null && !creates.has(t)) {
        throw new InvalidArgumentError(`${where}.pins`, t.id, 'a tensor created by this op or an earlier one');
      }
      t.uses.push(i);
    }
    for (const t of creates) {
      if (!pins.has(t)) throw new InvalidArgumentError(`${where}.creates`, t.id, `also in ${where}.pins`);
      if (t.createdAt !== null) throw new InvalidArgumentError(`${where}.creates`, t.id, `a tensor no other op creates (op ${t.createdAt} does)`);
      t.createdAt = i;
    }
    for (const t of writes) if (!pins.has(t)) throw new InvalidArgumentError(`${where}.writes`, t.id, `also in ${where}.pins`);
    for (const t of frees) {
      if (t.freedAt !== null) throw new InvalidArgumentError(`${where}.frees`, t.id, `a tensor no earlier op frees (op ${t.freedAt} does)`);
      if (createdBy.has(t) && t.createdAt === null) throw new InvalidArgumentError(`${where}.frees`, t.id, 'a tensor created by this op or an earlier one');
      t.freedAt = i;
    }
    return { pins, creates, writes, frees };
  });
}
