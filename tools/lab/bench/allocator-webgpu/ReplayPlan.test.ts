import { expect } from 'chai';
import type { TraceEvent } from '@stowage/lab/replay';
import { ALLOC, compileReplayPlan, FREE } from './ReplayPlan.js';

const alloc = (id: number, size: number): TraceEvent => ({ action: 'alloc', id, size, stream: 0 });
const freed = (id: number, action: 'free_requested' | 'free_completed' = 'free_requested'): TraceEvent => ({ action, id, size: 0, stream: 0 });

describe('compileReplayPlan', () => {
  it('scales sizes so that peak live bytes stay within the bound, each a multiple of 4', () => {
    const events = [alloc(0, 1000), alloc(1, 3001), freed(0), alloc(2, 999)];
    const plan = compileReplayPlan(events, 2000, 16);
    expect(plan.peakLiveBytes).to.be.at.most(2000);
    expect(plan.peakLiveBytes).to.be.above(1900);
    for (let i = 0; i < plan.length; i++) if (plan.kind[i] === ALLOC) expect(plan.size[i]! % 4).to.equal(0);
  });

  it('leaves sizes unscaled (rounded up to 4) when the peak is within the bound', () => {
    const plan = compileReplayPlan([alloc(0, 10), freed(0)], 1 << 20, 16);
    expect(plan.scale).to.equal(1);
    expect([...plan.size.subarray(0, plan.length)]).to.deep.equal([12, 0]);
  });

  it('frees at free_completed when the trace has one, skipping frees of ids never allocated', () => {
    const events = [alloc(0, 8), freed(0, 'free_requested'), alloc(1, 8), freed(0, 'free_completed'), freed(7)];
    const plan = compileReplayPlan(events, 1 << 20, 16);
    expect([...plan.kind.subarray(0, plan.length)]).to.deep.equal([ALLOC, ALLOC, FREE]);
    expect(plan.peakLiveBytes).to.equal(16);
  });

  it('counts bytes freed since the last submit in peakLiveAndPendingBytes', () => {
    const events = [alloc(0, 100), freed(0), alloc(1, 100), freed(1), alloc(2, 100)];
    expect(compileReplayPlan(events, 1 << 20, 2).peakLiveAndPendingBytes).to.equal(200);
    expect(compileReplayPlan(events, 1 << 20, 1).peakLiveAndPendingBytes).to.equal(100);
  });
});
