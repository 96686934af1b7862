import { InvalidArgumentError } from '@stowage/core';
import type { ModelTrace } from './Trace.js';

/**
 * The unconstrained peak of live bytes P over iterations 0 … iterations − 1: the persistent tensors plus the live
 * iteration tensors, counted after each op's creates and before its frees.
 * @throws InvalidArgumentError when `iterations` is not a positive integer
 */
export function peakLiveBytes(trace: ModelTrace, iterations: number): number {
  if (!Number.isSafeInteger(iterations) || iterations <= 0) throw new InvalidArgumentError('iterations', iterations, 'a positive integer');
  let live = trace.persistent.reduce((sum, t) => sum + t.bytes, 0);
  let peak = live;
  for (let i = 0; i < iterations; i++) {
    const { tensors, ops } = trace.iteration(i);
    const bytes = new Map(tensors.map((t) => [t.id, t.bytes]));
    for (const op of ops) {
      for (const t of op.creates) live += bytes.get(t)!;
      peak = Math.max(peak, live);
      for (const t of op.frees) live -= bytes.get(t)!;
    }
  }
  return peak;
}
