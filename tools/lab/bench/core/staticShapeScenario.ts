import type { TraceEvent } from '@stowage/lab/replay';
import { replayTrace } from '@stowage/lab/replay';
import type { BenchAllocator } from './benchAllocators.js';
import { createRandom } from './createRandom.js';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** Backend segment counts when one allocator instance replays the same sequence several times. */
export interface StaticShapeRun {
  /** Backend mallocs (segments and page maps) during the first iteration. */
  readonly backendMallocsFirst: number;
  /** Backend mallocs during all later iterations together; 0 for an allocator that reuses what it cached. */
  readonly backendMallocsAfterFirst: number;
  /** Backend mallocs of each iteration, first to last: where an allocator settles. */
  readonly backendMallocsPerIteration: number[];
}

/**
 * A training loop with static shapes: replays `events` `iterations` times on one allocator instance, never
 * calling emptyCache (each replay frees what it left live).
 */
export function runStaticShapeScenario(allocator: BenchAllocator, events: readonly TraceEvent[], iterations: number): StaticShapeRun {
  const backend = new VirtualMemoryBackend({ storeData: false });
  using instance = allocator.make(backend);
  const perIteration: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const before = backend.mallocCount;
    replayTrace(instance, events);
    perIteration.push(backend.mallocCount - before);
  }
  const backendMallocsFirst = perIteration[0] ?? 0;
  return { backendMallocsFirst, backendMallocsAfterFirst: backend.mallocCount - backendMallocsFirst, backendMallocsPerIteration: perIteration };
}

/**
 * The first `allocs` allocations of a trace with their frees, in trace order (`segment_*` and `oom` dropped);
 * allocations the trace never frees are freed by the replay at the end of each iteration.
 */
export function firstAllocations(events: readonly TraceEvent[], allocs: number): TraceEvent[] {
  const ids = new Set<number>();
  for (const e of events) {
    if (ids.size >= allocs) break;
    if (e.action === 'alloc') ids.add(e.id);
  }
  return events.filter((e) => (e.action === 'alloc' || e.action === 'free_requested' || e.action === 'free_completed') && ids.has(e.id));
}

/**
 * A synthetic sequence for when no traces are present: `allocs` allocations of log-uniform sizes (512 B to
 * 64 MiB, seeded), each freed after a random lifetime of 1 to 64 later allocations.
 */
export function syntheticAllocations(allocs: number): TraceEvent[] {
  const random = createRandom(0x57a71c);
  const events: TraceEvent[] = [];
  const freeAt = new Map<number, number[]>();
  const sizes: number[] = [];
  for (let id = 0; id < allocs; id++) {
    for (const dying of freeAt.get(id) ?? []) events.push({ action: 'free_requested', id: dying, size: sizes[dying]!, stream: 0 });
    freeAt.delete(id);
    sizes.push(random.logUniformBytes(512, 64 << 20));
    events.push({ action: 'alloc', id, size: sizes[id]!, stream: 0 });
    const death = id + 1 + random.below(64);
    const list = freeAt.get(death);
    if (list) list.push(id);
    else freeAt.set(death, [id]);
  }
  for (const [, ids] of [...freeAt].sort((a, b) => a[0] - b[0])) {
    for (const id of ids) events.push({ action: 'free_requested', id, size: sizes[id]!, stream: 0 });
  }
  return events;
}
