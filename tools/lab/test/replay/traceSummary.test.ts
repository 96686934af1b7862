import { expect } from 'chai';
import type { TraceEvent } from '@stowage/lab/replay';
import { InvalidArgumentError } from '@stowage/core';
import { traceSummary } from '@stowage/lab/replay';

const e = (action: TraceEvent['action'], id: number, size: number, extra: Partial<TraceEvent> = {}): TraceEvent => ({ action, id, size, stream: 0, ...extra });

describe('traceSummary', () => {
  it('refuses what is not a list of trace events with InvalidArgumentError naming the first bad one, counting nothing', () => {
    const bad: [unknown, RegExp][] = [
      [null, /events must be an array of trace events/],
      [[{ foo: 1 }], /events\[0\]\.action must be one of alloc/],
      [[e('alloc', 0, 8), null], /events\[1\] must be a trace event/],
      [[e('alloc', 0, -8)], /events\[0\]\.size must be a non-negative safe integer/],
      [[e('alloc', 0.5, 8)], /events\[0\]\.id must be a safe integer of at least -1/],
      [[{ action: 'alloc', id: 0, size: 8 }], /events\[0\]\.stream/],
      [[e('alloc', 0, 8, { pre: 'yes' as never })], /events\[0\]\.pre must be true or false/],
    ];
    for (const [events, pattern] of bad) {
      let error: unknown;
      try {
        traceSummary(events as TraceEvent[]);
      } catch (caught) {
        error = caught;
      }
      expect(error, `${JSON.stringify(events)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
  });

  it("counts events, peak live bytes, and PyTorch's segments and peak reserved bytes", () => {
    const summary = traceSummary([
      e('alloc', 0, 100, { pre: true }),
      e('segment_alloc', -1, 2048),
      e('alloc', 1, 300, { stream: 5 }),
      e('free_requested', 0, 100),
      e('free_completed', 0, 100),
      e('segment_map', -1, 4096),
      e('alloc', 2, 50),
      e('free_completed', 2, 50),
      e('segment_unmap', -1, 4096),
      e('segment_free', -1, 2048),
      e('segment_alloc', -1, 1024),
      e('oom', -1, 1 << 30),
    ]);
    expect(summary).to.deep.equal({
      events: 12,
      allocs: 3,
      preAllocs: 1,
      freeRequested: 1,
      freeCompleted: 2,
      streams: 2,
      peakLiveBytes: 400,
      finalLiveBytes: 300,
      segmentAllocs: 2,
      segmentFrees: 1,
      segmentMaps: 1,
      segmentUnmaps: 1,
      peakReservedBytes: 2048 + 4096,
      ooms: 1,
      capacityAtOomBytes: undefined, // recording began with allocations live: PyTorch's reserved bytes are unknown
    });
  });

  it('gives the memory PyTorch had at the first oom of a trace recorded from the start', () => {
    const summary = traceSummary([
      e('segment_alloc', -1, 20 << 20),
      e('alloc', 0, 3 << 20),
      { action: 'oom', id: -1, size: 1 << 30, stream: 0, deviceFree: 5 << 20 },
      e('segment_alloc', -1, 2 << 20),
      { action: 'oom', id: -1, size: 1 << 30, stream: 0, deviceFree: 1 << 20 },
    ]);
    expect(summary.capacityAtOomBytes).to.equal(25 << 20);
  });

  it('leaves peakReservedBytes undefined for a trace without segment events', () => {
    const summary = traceSummary([e('alloc', 0, 10), e('free_requested', 0, 10)]);
    expect(summary.peakReservedBytes).to.equal(undefined);
    expect(summary.peakLiveBytes).to.equal(10);
  });
});
