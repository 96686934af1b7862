import { join } from 'node:path';
import { expect } from 'chai';
import type { SegmentSummary } from '@stowage/cli';
import { EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, realTrace, runStowage, scratchDir } from './runStowage.js';

describe('stowage stats', function () {
  this.timeout(60_000);

  it("summarizes how a PyTorch snapshot's segments are filled: a page map per segment, free bytes internal and external, totals", function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const run = runStowage(['stats', pickle]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.match(/^segments: 216$/m); // the traces README's segment count
    expect(run.stdout).to.match(/^reserved: 13\.21 GiB$/m);
    expect(run.stdout).to.match(/^\[[a-z0-9* ]+\] \d+\.\d+ [KMG]iB: .* allocated, .* free/m);
    expect(run.stdout).to.match(/Legend:/);
  });

  it('accounts for every reserved byte, per segment and in total, with --json', function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const run = runStowage(['--json', 'stats', pickle, '--page', '2MiB']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const summary = JSON.parse(run.stdout) as SegmentSummary;
    expect(summary.segments).to.have.length(216);
    for (const s of summary.segments) {
      expect(s.allocatedBytes + s.roundingBytes + s.pendingBytes + s.freeBytes).to.equal(s.totalBytes);
      expect(s.pages).to.have.length(Math.ceil(s.totalBytes / (2 << 20)));
    }
    expect(summary.allocatedBytes + summary.roundingBytes + summary.pendingBytes + summary.freeBytes).to.equal(summary.totalBytes);
    expect(summary.totalBytes / 2 ** 30).to.be.closeTo(13.207, 0.001);
    const sizes = summary.segments.map((s) => s.totalBytes);
    expect(sizes).to.deep.equal([...sizes].sort((a, b) => a - b));
  });

  it('replays a trace to its end first, through --allocator', function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const pytorch = JSON.parse(runStowage(['--json', 'stats', trace]).stdout) as SegmentSummary & { source: string };
    const best = JSON.parse(runStowage(['--json', 'stats', trace, '-a', 'best']).stdout) as SegmentSummary & { source: string };
    expect(pytorch.source).to.match(/replayed through pytorch/);
    expect(best.source).to.match(/replayed through best/);
    expect(pytorch.allocatedBytes).to.equal(best.allocatedBytes); // the same allocations are live at the end
    expect(best.segments.length).to.be.lessThan(pytorch.segments.length);
  });

  it('refuses a page size that is not a byte size, exit 2, and a --device the snapshot lacks, exit 3', function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    expectCleanFailure(runStowage(['stats', pickle, '--page', 'big']), EXIT.usage, /--page must be a positive byte size/);
    expectCleanFailure(runStowage(['stats', pickle, '--device', '2']), EXIT.input, /has nothing on device 2; it has device 0/);
    expectCleanFailure(runStowage(['stats', join(scratchDir(), 'none.pickle')]), EXIT.input, /\[FILE_NOT_FOUND\]/);
  });
});
