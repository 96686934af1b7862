import { expect } from 'chai';
import fc from 'fast-check';
import { InvalidArgumentError } from '@stowage/core';
import type { ComputeModel, IterationTrace, ModelTrace, TraceOp, TraceTensor } from '@stowage/example-train';
import { kernelDurationNs, maxOpWorkingSet, peakLiveBytes } from '@stowage/example-train';
import type { BuiltInPolicyName } from '@stowage/lms';
import type { LinkProfile } from '@stowage/lab';
import { hiddenShareCeiling, iterationLowerBound } from './iterationLowerBound.js';
import { runAddressOnly } from './runAddressOnly.js';

// The physical lower bound on an iteration's time (Note [The iteration's lower bound]): hand-computed on small
// sequences, and never above what a schedule takes: LMS's, on the address-only simulated device, on random traces.

const GB_PER_SECOND = 1e9; // one byte per nanosecond: a copy of b bytes takes b ns

function op(name: string, uses: { reads?: number[]; creates?: number[]; updates?: number[]; frees?: number[] }): TraceOp {
  return { name, reads: uses.reads ?? [], creates: uses.creates ?? [], updates: uses.updates ?? [], frees: uses.frees ?? [], flops: 0, bytesAccessed: 0 };
}

function bound(persistent: TraceTensor[], iteration: IterationTrace, capacityBytes: number, kernelNs: number[]) {
  return iterationLowerBound(persistent, iteration, { capacityBytes, kernelNs, pageOutBytesPerSecond: GB_PER_SECOND, pageInBytesPerSecond: GB_PER_SECOND });
}

/** Two 100-byte activations, each used once after the other is made: with room for one, both go out and come back. */
const TWO_ACTIVATIONS: IterationTrace = {
  tensors: [
    { id: 1, bytes: 100, name: 'a' },
    { id: 2, bytes: 100, name: 'b' },
  ],
  ops: [op('make a', { creates: [1] }), op('make b', { creates: [2] }), op('use a', { reads: [1], frees: [1] }), op('use b', { reads: [2], frees: [2] })],
};

describe('iterationLowerBound', () => {
  it('is the kernels alone when everything fits', () => {
    const b = bound([{ id: 0, bytes: 50, name: 'w' }], { tensors: TWO_ACTIVATIONS.tensors, ops: TWO_ACTIVATIONS.ops.map((o) => ({ ...o, reads: [...o.reads, 0] })) }, 250, [10, 20, 30, 40]);
    expect(b).to.deep.equal({ timeNs: 100, computeNs: 100, unhiddenOutNs: 0, unhiddenInNs: 0, cutOutBytes: 0, cutInBytes: 0 });
  });

  it('serializes the page-outs a full memory forces before an op and the page-ins it forces after', () => {
    // Kernels of 10 ns, room for 100 bytes, 1 byte/ns each way. b cannot start before a has left (10 + 100);
    // a cannot be used before b has left (120 + 100); b cannot be used before a's op ends and b came back
    // (230 + 100): 340 ns. (A real schedule takes 440: a comes back only once b's page-out freed the room, which
    // the bound does not model.) Each copy fills a window without a kernel: 200 ns per direction unhidden.
    const b = bound([], TWO_ACTIVATIONS, 100, [10, 10, 10, 10]);
    expect(b).to.deep.equal({ timeNs: 340, computeNs: 40, unhiddenOutNs: 200, unhiddenInNs: 200, cutOutBytes: 100, cutInBytes: 100 });
  });

  it('lets a long kernel hide the copies it overlaps', () => {
    // make a (10 ns), then a 1,000 ns op that pins 60 bytes of its own beside a's 100: with room for 120, 40
    // bytes of a must be gone before it starts (a window without a kernel: ≥ 40 ns after a is made) and back
    // after it ends. a's own page-out and page-in can overlap the long kernel only in part.
    const iteration: IterationTrace = {
      tensors: [
        { id: 1, bytes: 100, name: 'a' },
        { id: 2, bytes: 60, name: 'c' },
      ],
      ops: [op('make a', { creates: [1] }), op('long', { creates: [2], frees: [2] }), op('use a', { reads: [1], frees: [1] })],
    };
    const b = bound([], iteration, 120, [10, 1000, 10]);
    // The out cut at op 1 needs 100 + 60 − 120 = 40 bytes out after op 0 ends: op 1 starts ≥ 50. The in cut
    // (1, 2) needs the same 40 bytes back after op 1 ends: op 2 starts ≥ 1050 + 40.
    expect(b).to.deep.equal({ timeNs: 1100, computeNs: 1020, unhiddenOutNs: 40, unhiddenInNs: 40, cutOutBytes: 40, cutInBytes: 40 });
  });

  it('brings a weight in once the op holding the room ended, and pages nothing out for a clean one', () => {
    // Two 100-byte weights read in turn with room for 100, 10 ns kernels: w1 comes in after op 0 ends (the in
    // cut (0, 1)): 10 + 100 + 10 ns, which dropping w0 and paging w1 in reaches. Nothing is written: no page-out.
    const persistent = [
      { id: 0, bytes: 100, name: 'w0' },
      { id: 1, bytes: 100, name: 'w1' },
    ];
    const b = bound(persistent, { tensors: [], ops: [op('use w0', { reads: [0] }), op('use w1', { reads: [1] })] }, 100, [10, 10]);
    expect(b).to.deep.equal({ timeNs: 120, computeNs: 20, unhiddenOutNs: 0, unhiddenInNs: 100, cutOutBytes: 0, cutInBytes: 100 });
  });

  it('makes a weight updated in the iteration leave before an op that needs its room', () => {
    // w0 updated by op 0, then op 1 reads w1: w0 is dirty and must leave (after op 0) and w1 come in (after op 0)
    // before op 1: 120 ns, each direction 100 ns without a kernel. (A real schedule takes 220: w1's room is w0's,
    // free only once w0's page-out ended; the bound lets the two directions overlap.)
    const persistent = [
      { id: 0, bytes: 100, name: 'w0' },
      { id: 1, bytes: 100, name: 'w1' },
    ];
    const b = bound(persistent, { tensors: [], ops: [op('step w0', { updates: [0] }), op('use w1', { reads: [1] })] }, 100, [10, 10]);
    expect(b).to.deep.equal({ timeNs: 120, computeNs: 20, unhiddenOutNs: 100, unhiddenInNs: 100, cutOutBytes: 100, cutInBytes: 100 });
  });

  it('refuses an op whose pins exceed the capacity and kernel times of another length', () => {
    expect(() => bound([], TWO_ACTIVATIONS, 99, [1, 1, 1, 1])).to.throw(InvalidArgumentError, /op 0's pinned bytes \(100\)/);
    expect(() => bound([], TWO_ACTIVATIONS, 100, [1, 1])).to.throw(InvalidArgumentError, /4 kernel times/);
    expect(() => bound([], { tensors: [], ops: [op('x', { reads: [7] })] }, 100, [1])).to.throw(InvalidArgumentError, /tensors created by an earlier op/);
  });
});

describe('hiddenShareCeiling', () => {
  it('is the issue formula lowered by the time no schedule hides', () => {
    expect(hiddenShareCeiling(100, 300, 0)).to.equal(1);
    expect(hiddenShareCeiling(100, 50, 0)).to.equal(0.5);
    expect(hiddenShareCeiling(100, 300, 30)).to.equal(0.7);
    expect(hiddenShareCeiling(0, 300, 0)).to.equal(null);
  });
});

// Random traces for the property: persistent weights, then ops that read live tensors and weights, create new
// ones, update weights and free what no later op uses; sizes in 512-byte units (the simulated allocator's rounding).
const UNIT = 512;

interface RandomTrace {
  readonly persistent: TraceTensor[];
  readonly iteration: IterationTrace;
}

const randomTrace: fc.Arbitrary<RandomTrace> = fc
  .record({
    weights: fc.array(fc.integer({ min: 1, max: 8 }), { minLength: 1, maxLength: 4 }),
    ops: fc.array(
      fc.record({
        reads: fc.array(fc.nat(), { maxLength: 3 }),
        creates: fc.array(fc.integer({ min: 1, max: 16 }), { maxLength: 2 }),
        update: fc.option(fc.nat(), { nil: undefined }),
        keep: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
        flops: fc.integer({ min: 0, max: 4000 }),
      }),
      { minLength: 2, maxLength: 14 },
    ),
  })
  .map(({ weights, ops }) => {
    const persistent = weights.map((units, id) => ({ id, bytes: units * UNIT, name: `w${id}` }));
    const tensors: TraceTensor[] = [];
    const built: TraceOp[] = [];
    let live: number[] = [];
    let next = persistent.length;
    for (const [t, o] of ops.entries()) {
      const pool = [...live, ...persistent.map((w) => w.id)];
      const reads = [...new Set(o.reads.map((r) => pool[r % pool.length]!))];
      const creates = o.creates.map((units) => {
        tensors.push({ id: next, bytes: units * UNIT, name: `x${next}` });
        return next++;
      });
      const updates = o.update === undefined ? [] : [o.update % persistent.length];
      const last = t === ops.length - 1;
      // Free a live tensor this op read or one it keeps no longer (the last op frees everything left).
      const frees = last ? [...live, ...creates] : live.filter((id, i) => reads.includes(id) && !o.keep[i % 4]!);
      live = last ? [] : [...live.filter((id) => !frees.includes(id)), ...creates];
      built.push({ name: `op${t}`, reads, creates, updates, frees, flops: o.flops * 1000, bytesAccessed: 0 });
    }
    return { persistent, iteration: { tensors, ops: built } };
  });

/** 1 TFLOP/s: an op of f flops runs f / 1000 ns; copies of a few KiB take a few µs at 1 GB/s. */
const COMPUTE: ComputeModel = { flopsPerSecond: 1e12, memoryBytesPerSecond: 1e12 };
const LINK: LinkProfile = { bytesPerSecond: 1e9, latencyNs: 100 };

function modelTraceOf(r: RandomTrace): ModelTrace {
  return { name: 'random', shapes: {}, persistent: r.persistent, iteration: () => r.iteration };
}

describe('iterationLowerBound against simulated schedules', () => {
  it('is never above the time, nor its unhidden copy times above those, of LMS schedules of random traces, with each policy, speculation on and off', async () => {
    let checked = 0;
    let copiesBind = 0; // runs whose bound is above the kernels' time: the cuts decide it
    await fc.assert(
      fc.asyncProperty(randomTrace, fc.double({ min: 0, max: 1, noNaN: true }), fc.constantFrom<BuiltInPolicyName>('lru', 'best-fit', 'speculative'), fc.boolean(), async (r, slack, policy, speculation) => {
        const trace = modelTraceOf(r);
        const floor = Math.max(maxOpWorkingSet(trace, 0), r.persistent.reduce((s, w) => Math.max(s, w.bytes), 0));
        const peak = peakLiveBytes(trace, 1);
        const budgetBytes = Math.ceil((floor + slack * (peak - floor) + 4 * UNIT) / UNIT) * UNIT;
        const run = await runAddressOnly({ trace, iterations: 3, budgetBytes, link: LINK, computeModel: COMPUTE, policy, speculation });
        if (!run.fits) return; // the allocator's own overheads: no schedule to compare with
        const b = iterationLowerBound(r.persistent, r.iteration, {
          capacityBytes: budgetBytes,
          kernelNs: r.iteration.ops.map((o) => kernelDurationNs(o, COMPUTE)),
          pageOutBytesPerSecond: LINK.bytesPerSecond,
          pageInBytesPerSecond: LINK.bytesPerSecond,
        });
        if (b.timeNs > b.computeNs) copiesBind++;
        for (const it of run.iterations) {
          checked++;
          expect(it.timeNs).to.be.at.least(b.timeNs);
          expect(it.d2hBusyNs * (1 - (it.hiddenOut ?? 0)) + 1e-6).to.be.at.least(b.unhiddenOutNs);
          expect(it.h2dBusyNs * (1 - (it.hiddenIn ?? 0)) + 1e-6).to.be.at.least(b.unhiddenInNs);
        }
      }),
      { numRuns: 150, seed: 33 },
    );
    expect(checked).to.be.greaterThan(150);
    expect(copiesBind).to.be.greaterThan(20);
  });
});
