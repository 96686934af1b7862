import { expect } from 'chai';
import type { TraceEvent } from '@stowage/lab/replay';
import { FreeListModel } from './FreeListModel.js';
import { compileReplayPlan } from './ReplayPlan.js';

const alloc = (id: number, size: number): TraceEvent => ({ action: 'alloc', id, size, stream: 0 });
const freed = (id: number): TraceEvent => ({ action: 'free_requested', id, size: 0, stream: 0 });
const creates = (events: TraceEvent[]): number => FreeListModel.replay(compileReplayPlan(events, 1 << 30, 1)).creates;

describe('FreeListModel', () => {
  it('reuses a freed buffer for a later request of the same size, after the submit that follows the free', () => {
    expect(creates([alloc(0, 100), freed(0), alloc(1, 100)])).to.equal(1);
  });

  it('creates a buffer for every request no waiting buffer matches exactly', () => {
    expect(creates([alloc(0, 100), alloc(1, 100), freed(0), alloc(2, 104), alloc(3, 100), alloc(4, 100)])).to.equal(4);
  });
});
