import { expect } from 'chai';
import type { TraceEvent } from '@stowage/lab/replay';
import { compareWithTfjs } from './compareWithTfjs.js';
import type { PassLine } from './PassLine.js';
import { compileReplayPlan } from './ReplayPlan.js';

const MiB = 2 ** 20;
const alloc = (id: number, size: number): TraceEvent => ({ action: 'alloc', id, size, stream: 0 });
const freed = (id: number): TraceEvent => ({ action: 'free_requested', id, size: 0, stream: 0 });

/** A pass line with the figures a test does not care about filled in. */
function pass(allocator: string, p: PassLine['pass'], fields: Partial<PassLine>): PassLine {
  return {
    allocator,
    trace: 't',
    pass: p,
    ops: 1000,
    opsPerSec: 1000,
    createBufferCalls: 0,
    peakAllocated: 512 * MiB,
    peakReserved: 512 * MiB,
    rssAboveBaseline: 512 * MiB,
    processCpuMs: 1,
    ...fields,
  };
}

describe('compareWithTfjs#targetsMet', () => {
  const plan = compileReplayPlan([alloc(0, 512 * MiB), freed(0)], 512 * MiB, 1);

  it('does not count a Stowage replay that stopped early as meeting the memory and createBuffer targets', () => {
    // Stowage threw at op 3 of 1000 (say the device was lost): its figures cover 3 operations, not the trace.
    const lines = [
      pass('stowage', 'cold', { ops: 3, createBufferCalls: 1, peakReserved: 32 * MiB, rssAboveBaseline: 33 * MiB, failed: 'stowage threw at op 3: lost' }),
      pass('tfjs', 'cold', { createBufferCalls: 900, peakReserved: 600 * MiB, rssAboveBaseline: 700 * MiB }),
      pass('tfjs', 'warm', { peakReserved: 600 * MiB, rssAboveBaseline: 700 * MiB }),
    ];
    const summary = compareWithTfjs('t', plan, lines) as { targetsMet: Record<string, boolean> };
    // The targets hold "on every trace" for a replay of the trace; a replay that never finished meets none.
    expect(summary.targetsMet).to.deep.equal({ createBufferCalls: false, reserved: false, rss: false, opsPerSecCold: false, opsPerSecWarm: false });
  });
});
