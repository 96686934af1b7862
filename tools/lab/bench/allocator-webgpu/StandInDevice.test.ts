import { expect } from 'chai';
import type { TraceEvent } from '@stowage/lab/replay';
import { replayAllocatorKinds } from './replayAllocatorKinds.js';
import { replayPass } from './replayPass.js';
import { compileReplayPlan } from './ReplayPlan.js';
import { RssSampler } from './RssSampler.js';
import { standInContext } from './StandInDevice.js';

const KiB = 2 ** 10;
const MiB = 2 ** 20;
const alloc = (id: number, size: number): TraceEvent => ({ action: 'alloc', id, size, stream: 0 });
const freed = (id: number): TraceEvent => ({ action: 'free_requested', id, size: 0, stream: 0 });

describe('standInContext (the allocator-cost bench)', () => {
  // Three tensors of two sizes live at once, freed, then one of each size again: tfjs keeps a buffer per
  // distinct (size, usage) and reuses it after the submit; Stowage carves them all from its first segment (416 KiB:
  // Note [WebGPU segment sizing]).
  const plan = compileReplayPlan(
    [alloc(0, 16 * KiB), alloc(1, 16 * KiB), alloc(2, 64 * KiB), freed(0), freed(1), freed(2), alloc(3, 16 * KiB), alloc(4, 64 * KiB), freed(3), freed(4)],
    512 * MiB,
    1,
  );
  const options = { submitEveryFrees: 1, stopReservedBytes: Number.MAX_SAFE_INTEGER, rssEveryOps: 2 ** 30, rss: new RssSampler() };

  for (const kind of replayAllocatorKinds().filter((k) => k.steady)) {
    it(`replays a plan through ${kind.name} twice, creating buffers only in the first pass`, () => {
      const allocator = kind.create(standInContext());
      try {
        const first = replayPass(allocator, plan, options);
        const second = replayPass(allocator, plan, options);
        expect(first.failed).to.equal(undefined);
        expect(second.failed).to.equal(undefined);
        expect([first.ops, second.ops]).to.deep.equal([plan.length, plan.length]);
        expect(first.createBufferCalls).to.equal(kind.name === 'tfjs' ? 3 : 1);
        expect(second.createBufferCalls).to.equal(0);
        expect(allocator.peakReservedBytes).to.be.at.least(96 * KiB);
      } finally {
        allocator.dispose();
      }
    });
  }

  it('reports no error from its error scopes and a device that is never lost', async () => {
    const { device } = standInContext();
    device.pushErrorScope('out-of-memory');
    expect(await device.popErrorScope()).to.equal(null);
    const lost = await Promise.race([device.lost.then(() => 'lost'), new Promise((resolve) => setTimeout(() => resolve('alive'), 10))]);
    expect(lost).to.equal('alive');
  });
});
