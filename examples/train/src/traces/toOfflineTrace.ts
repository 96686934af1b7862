import { InvalidArgumentError } from '@stowage/core';
import type { OfflineOp, OfflineTensor, OfflineTrace } from '@stowage/lab';
import type { ModelTrace } from './Trace.js';

/**
 * Iterations 0 … iterations − 1 of `trace` as one `OfflineTrace`, for `beladyMin`:
 * - A persistent tensor keeps its id (a number) and is created by no op: it exists before the trace, with a host
 *   copy, and is never freed.
 * - Iteration i's tensor `id` becomes `${i}:${id}` (a string), unique across the whole offline trace.
 * - An op pins what it reads, creates and updates; it writes what it updates; creates and frees carry over.
 * @throws InvalidArgumentError when `iterations` is not a positive integer
 */
export function toOfflineTrace(trace: ModelTrace, iterations: number): OfflineTrace {
  if (!Number.isSafeInteger(iterations) || iterations <= 0) throw new InvalidArgumentError('iterations', iterations, 'a positive integer');
  const tensors: OfflineTensor[] = trace.persistent.map((t) => ({ id: t.id, bytes: t.bytes }));
  const ops: OfflineOp[] = [];
  const persistentIds = new Set(trace.persistent.map((t) => t.id));
  for (let i = 0; i < iterations; i++) {
    const iteration = trace.iteration(i);
    const offlineId = (id: number) => (persistentIds.has(id) ? id : `${i}:${id}`);
    for (const t of iteration.tensors) tensors.push({ id: offlineId(t.id), bytes: t.bytes });
    for (const op of iteration.ops) {
      ops.push({
        pins: [...op.reads, ...op.creates, ...op.updates].map(offlineId),
        creates: op.creates.map(offlineId),
        writes: op.updates.map(offlineId),
        frees: op.frees.map(offlineId),
      });
    }
  }
  return { tensors, ops };
}
