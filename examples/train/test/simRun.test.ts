import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import type { BuiltInPolicyName } from '@stowage/lms';
import type { LinkProfile } from '@stowage/lab';
import { LINK_PROFILES } from '@stowage/lab';
import type { ComputeModel, SimRunOptions } from '@stowage/example-train';
import { figuresAgainst, H100_COMPUTE, hiddenShare, kernelDurationNs, runTraceOnSim } from '@stowage/example-train';

type ModelTrace = SimRunOptions['trace'];
type TraceOp = ReturnType<ModelTrace['iteration']>['ops'][number];

/** 1 byte per nanosecond plus 100 ns a copy: a 1024-byte copy takes 1124 ns. */
const ONE_BYTE_PER_NS: LinkProfile = { bytesPerSecond: 1e9, latencyNs: 100 };
/** One flop per nanosecond; memory traffic free: an op takes its flops in nanoseconds. */
const ONE_FLOP_PER_NS: ComputeModel = { flopsPerSecond: 1e9, memoryBytesPerSecond: 1e18 };
const COPY_NS = 1124;
const POLICIES: readonly BuiltInPolicyName[] = ['lru', 'best-fit', 'speculative'];

function op(name: string, parts: Partial<Omit<TraceOp, 'name'>>): TraceOp {
  return { name, reads: [], creates: [], updates: [], frees: [], flops: 0, bytesAccessed: 0, ...parts };
}

/**
 * Two 1 KiB weights (ids 1, 2) and, per iteration: `a` reads w1 and makes x (id 10); `b` reads x, updates w2 and
 * frees x; `c` reads w2 and updates w1. 1000 flops each. Peak 3 KiB; two tensors at once fit 2 KiB.
 */
const TWO_WEIGHTS: ModelTrace = {
  name: 'two-weights',
  shapes: { weights: 2, bytes: 1024 },
  persistent: [
    { id: 1, bytes: 1024, name: 'w1' },
    { id: 2, bytes: 1024, name: 'w2' },
  ],
  iteration: () => ({
    tensors: [{ id: 10, bytes: 1024, name: 'x' }],
    ops: [
      op('a', { reads: [1], creates: [10], flops: 1000 }),
      op('b', { reads: [10], updates: [2], frees: [10], flops: 1000 }),
      op('c', { reads: [2], updates: [1], flops: 1000 }),
    ],
  }),
};

/**
 * A small layer stack: `layers` weights of `bytes`; forward makes an activation per layer (kept for backward),
 * backward reads them in reverse, makes a gradient per layer, and updates the weight; activations and gradients
 * are freed after their last use. Peak: every weight and activation, plus a gradient.
 */
function layerStack(layers: number, bytes: number): ModelTrace {
  const weight = (l: number): number => 1 + l;
  const activation = (l: number): number => 100 + l;
  const gradient = (l: number): number => 200 + l;
  const persistent = Array.from({ length: layers }, (_, l) => ({ id: weight(l), bytes, name: `w${l}` }));
  return {
    name: `layer-stack-${layers}`,
    shapes: { layers, bytes },
    persistent,
    iteration: () => {
      const tensors = [...Array.from({ length: layers }, (_, l) => ({ id: activation(l), bytes, name: `a${l}` })), ...Array.from({ length: layers }, (_, l) => ({ id: gradient(l), bytes, name: `g${l}` }))];
      const ops: TraceOp[] = [];
      for (let l = 0; l < layers; l++) ops.push(op(`fwd${l}`, { reads: l === 0 ? [weight(l)] : [weight(l), activation(l - 1)], creates: [activation(l)], flops: 3000, bytesAccessed: 3 * bytes }));
      for (let l = layers - 1; l >= 0; l--) {
        const reads = l === layers - 1 ? [activation(l)] : [activation(l), gradient(l + 1)];
        const frees = l === layers - 1 ? [] : [gradient(l + 1)];
        ops.push(op(`bwd${l}`, { reads: [...reads, weight(l)], creates: [gradient(l)], frees: [...frees, activation(l)], flops: 6000, bytesAccessed: 4 * bytes }));
        ops.push(op(`sgd${l}`, { reads: [gradient(l)], updates: [weight(l)], frees: l === 0 ? [gradient(l)] : [], flops: 1000, bytesAccessed: 3 * bytes }));
      }
      return { tensors, ops };
    },
  };
}

const base = { link: ONE_BYTE_PER_NS, policy: 'lru', speculation: false, computeModel: ONE_FLOP_PER_NS } as const;

describe('kernelDurationNs', () => {
  it('takes the larger of compute time and memory time, rounded up to whole nanoseconds', () => {
    expect(kernelDurationNs({ flops: 4e12, bytesAccessed: 0 }, H100_COMPUTE)).to.equal(10_000_000); // 4e12 / 400e12 s
    expect(kernelDurationNs({ flops: 0, bytesAccessed: 2.68e9 }, H100_COMPUTE)).to.equal(1_000_000); // 2.68e9 B / 2.68e12 B/s
    expect(kernelDurationNs({ flops: 1, bytesAccessed: 1 }, H100_COMPUTE)).to.equal(1);
    expect(kernelDurationNs({ flops: 0, bytesAccessed: 0 }, H100_COMPUTE)).to.equal(0);
    expect(kernelDurationNs({ flops: 1000, bytesAccessed: 10 }, ONE_FLOP_PER_NS)).to.equal(1000);
  });
});

describe('hiddenShare', () => {
  const entry = (engine: 'compute' | 'd2h', startNs: number, endNs: number) => ({ engine, name: 'x', startNs, endNs });
  it('gives the share of copy time during which a kernel ran', () => {
    const kernels = [entry('compute', 0, 100), entry('compute', 150, 200)];
    expect(hiddenShare([entry('d2h', 50, 150)], kernels)).to.equal(0.5);
    expect(hiddenShare([entry('d2h', 0, 100), entry('d2h', 100, 200)], kernels)).to.equal(0.75);
    expect(hiddenShare([entry('d2h', 200, 300)], kernels)).to.equal(0);
    expect(hiddenShare([], kernels)).to.equal(null);
  });
});

describe('runTraceOnSim', () => {
  it('runs an unconstrained trace as compute alone: kernels back to back, nothing moved, no stall', async () => {
    const run = await runTraceOnSim({ ...base, trace: TWO_WEIGHTS, iterations: 3 });
    expect(run.fits).to.equal(true);
    for (const it of run.iterations) {
      expect(it).to.deep.include({ timeNs: 3000, computeBusyNs: 3000, stallNs: 0, d2hBytes: 0, h2dBytes: 0, hiddenOut: null, hiddenIn: null, boundNs: 3000 });
      expect(it.stats.page_out).to.equal(0);
    }
    expect(run.reservedPeakBytes).to.equal(3 * 1024);
    expect(run.checksums).to.have.length(2);
    expect(figuresAgainst(run.iterations[2]!, 3000)).to.deep.equal({ slowdown: 1, gapToBound: 0 });
  });

  it('runs a budgeted trace on the schedule worked out by hand', async () => {
    // Budget 2 KiB. Setup writes w1 [0, 1124] and w2 [1124, 2248] on h2d; iteration 0 starts at 2248.
    // a: w1 pinned; x needs room: w2 (the only inactive) goes out, d2h [2248, 3372]; x reuses its block, so
    //    the kernel waits for the page-out: [3372, 4372].
    // b: x pinned; w2 comes back, needing room: w1 goes out (x is pinned), d2h [4372, 5496]; w2 comes in to w1's
    //    old block once that page-out has read it: h2d [5496, 6620]; kernel [6620, 7620]; x freed (cached).
    // c: w2 pinned; w1 comes in to x's cached block: h2d [7620, 8744]; kernel [8744, 9744].
    // Every weight is written each iteration, so no host copy survives: iteration 1 repeats it, 7496 ns later.
    const run = await runTraceOnSim({ ...base, trace: TWO_WEIGHTS, iterations: 3, budgetBytes: 2048 });
    expect(run.fits).to.equal(true);
    const [first, ...rest] = run.iterations;
    expect(first).to.deep.include({
      timeNs: 9744 - 2248,
      computeBusyNs: 3000,
      stallNs: 9744 - 2248 - 3000,
      d2hBusyNs: 2 * COPY_NS,
      d2hBytes: 2048,
      h2dBusyNs: 2 * COPY_NS,
      h2dBytes: 2048,
      hiddenOut: 0,
      hiddenIn: 0,
      boundNs: 3000,
      reservedPeakBytes: 2048,
    });
    expect(first!.stats).to.deep.include({ page_out: 2, page_out_bytes: 2048, page_in: 2, page_in_bytes: 2048, iterations: 1 });
    for (const it of rest) {
      expect({ ...it, iteration: 0, stats: first!.stats }).to.deep.equal(first);
      expect(it.stats).to.deep.include({ page_out: 2, page_out_bytes: 2048, page_in: 2, page_in_bytes: 2048 });
    }
    expect(figuresAgainst(first!, 3000)).to.deep.equal({ slowdown: 7496 / 3000, gapToBound: 4496 / 3000 });
  });

  it('overlaps transfers with compute when the host runs ahead of the device', async () => {
    const sync = await runTraceOnSim({ ...base, trace: layerStack(6, 4096), iterations: 2, budgetBytes: 5 * 4096 });
    const ahead = await runTraceOnSim({ ...base, trace: layerStack(6, 4096), iterations: 2, budgetBytes: 5 * 4096, runAhead: 4 });
    expect(ahead.checksums).to.deep.equal(sync.checksums);
    expect(ahead.iterations[1]!.timeNs).to.be.below(sync.iterations[1]!.timeNs);
    expect(ahead.iterations[1]!.hiddenOut).to.be.above(0);
  });

  it('counts LMS\'s statistics in the iteration they are about: one iteration each, predicted once learned', async () => {
    const run = await runTraceOnSim({ ...base, trace: layerStack(6, 4096), iterations: 5, budgetBytes: 4 * 4096, policy: 'speculative', speculation: true });
    expect(run.iterations.map((it) => it.stats.iterations)).to.deep.equal([1, 1, 1, 1, 1]);
    expect(run.iterations[0]!.stats.iterations_predicted, 'nothing learned yet').to.equal(0);
    for (const it of run.iterations.slice(3)) {
      expect(it.stats.iterations_predicted).to.equal(1);
      expect(it.stats.speculative_hits).to.be.above(0);
    }
  });

  it('replays its schedule on other links exactly as runs on those links would go', async () => {
    const trace = layerStack(8, 1 << 20);
    const links = ['pcie5', 'c2c', ONE_BYTE_PER_NS] as const;
    for (const [policy, speculation, runAhead] of [['lru', false, 0], ['speculative', true, 0], ['best-fit', true, 3]] as const) {
      const settings = { trace, iterations: 3, budgetBytes: 5 << 20, policy, speculation, runAhead, computeModel: H100_COMPUTE };
      const run = await runTraceOnSim({ ...settings, link: 'pcie4', replayLinks: links });
      expect(run.replays.map((r) => r.link)).to.deep.equal(links.map((l) => (typeof l === 'string' ? LINK_PROFILES[l] : l)));
      for (const [j, link] of links.entries()) {
        const direct = await runTraceOnSim({ ...settings, link });
        expect(run.replays[j]!.iterations, `${policy}, speculation ${speculation}, run-ahead ${runAhead}, on ${JSON.stringify(link)}`).to.deep.equal(direct.iterations);
      }
      expect(run.replays[0]!.iterations[2]!.timeNs, 'pcie5 is faster than pcie4').to.be.below(run.iterations[2]!.timeNs);
    }
  });

  for (const [trace, budgets] of [
    [TWO_WEIGHTS, [2048]],
    [layerStack(6, 4096), [7 * 4096, 4 * 4096]],
  ] as const) {
    it(`gives ${trace.name}'s persistent bytes bit-identical to the unconstrained run under every policy, with and without speculation, reserved never over the budget`, async () => {
      const free = await runTraceOnSim({ ...base, trace, iterations: 4 });
      for (const budgetBytes of budgets) {
        for (const policy of POLICIES) {
          for (const speculation of [false, true]) {
            const run = await runTraceOnSim({ ...base, trace, iterations: 4, budgetBytes, policy, speculation });
            const where = `${budgetBytes} B, ${policy}, speculation ${speculation}`;
            expect(run.fits, `${where}: ${run.error}`).to.equal(true);
            expect(run.checksums, where).to.deep.equal(free.checksums);
            expect(run.reservedPeakBytes, where).to.be.at.most(budgetBytes);
            expect(run.iterations.map((it) => it.reservedPeakBytes).every((bytes) => bytes <= budgetBytes), where).to.equal(true);
            expect(run.iterations[3]!.stats.page_out, `${where}: it paged`).to.be.above(0);
          }
        }
      }
    });
  }

  it('reports a budget under one op\'s operands as fits false with the OutOfMemoryError\'s message', async () => {
    const run = await runTraceOnSim({ ...base, trace: TWO_WEIGHTS, iterations: 2, budgetBytes: 1024 });
    expect(run.fits).to.equal(false);
    expect(run.error).to.match(/tried to allocate/i);
    expect(run.checksums).to.equal(null);
  });

  it('refuses a bad iteration count, budget or run-ahead', async () => {
    for (const bad of [{ iterations: 0 }, { iterations: 1, budgetBytes: 0 }, { iterations: 1, budgetBytes: 1.5 }, { iterations: 1, runAhead: -1 }, { iterations: 1, replayLinks: ['pcie9' as 'pcie5'] }]) {
      let error: unknown;
      try {
        await runTraceOnSim({ ...base, trace: TWO_WEIGHTS, ...bad });
      } catch (caught) {
        error = caught;
      }
      expect(error, JSON.stringify(bad)).to.be.instanceOf(InvalidArgumentError);
    }
  });
});
