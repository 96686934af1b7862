import { expect } from 'chai';
import type { AllocatorEventRecord } from '@stowage/cli';
import { toChromeTrace } from '@stowage/cli';

describe('toChromeTrace', () => {
  const events: AllocatorEventRecord[] = [
    { action: 'segment_alloc', addr: 0x1000, size: 2 << 20, stream: 0, timeUs: 0 },
    { action: 'alloc', addr: 0x1000, size: 4096, stream: 0, timeUs: 10 },
    { action: 'snapshot', addr: 0, size: 4096, stream: 0, timeUs: 20 },
    { action: 'page_out', addr: 0x1000, size: 4096, stream: 0, timeUs: 30 },
    { action: 'free_completed', addr: 0x1000, size: 4096, stream: 0, timeUs: 40 },
  ];

  it('draws each allocation as an async slice and the allocated and reserved bytes as a counter', () => {
    const trace = toChromeTrace(events, 'test');
    const slice = trace.traceEvents.filter((e) => e.cat === 'allocation');
    expect(slice.map((e) => [e.ph, e.ts])).to.deep.equal([['b', 10], ['e', 40]]);
    const counter = trace.traceEvents.filter((e) => e.ph === 'C').map((e) => [e.ts, e.args]);
    expect(counter).to.deep.equal([
      [0, { allocated: 0, reserved: 2 << 20 }],
      [10, { allocated: 4096, reserved: 2 << 20 }],
      [40, { allocated: 0, reserved: 2 << 20 }],
    ]);
  });

  it("shows a `snapshot` entry as a snapshot taken, an instant across all tracks, not as an LMS event", () => {
    const trace = toChromeTrace(events, 'test');
    const snapshots = trace.traceEvents.filter((e) => e.cat === 'snapshot');
    expect(snapshots).to.have.length(1);
    expect(snapshots[0]).to.deep.include({ name: 'snapshot', ph: 'i', s: 'g', ts: 20, args: { activeBytes: 4096 } });
    expect(trace.traceEvents.filter((e) => e.cat === 'lms').map((e) => e.name)).to.deep.equal(['page_out 4.00 KiB']);
  });
});
