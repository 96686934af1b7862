import type { ModelTrace } from './Trace.js';

/**
 * The most bytes one op of iteration `i` needs resident at once: the distinct tensors it reads, creates and
 * updates. No budget below it runs the iteration.
 */
export function maxOpWorkingSet(trace: ModelTrace, i: number): number {
  const { tensors, ops } = trace.iteration(i);
  const bytes = new Map([...trace.persistent, ...tensors].map((t) => [t.id, t.bytes]));
  let max = 0;
  for (const op of ops) {
    const used = new Set([...op.reads, ...op.creates, ...op.updates]);
    max = Math.max(max, [...used].reduce((sum, t) => sum + bytes.get(t)!, 0));
  }
  return max;
}
