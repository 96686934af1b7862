import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { readTrace } from '@stowage/lab/replay';
import type { ChromeTrace } from '@stowage/cli';
import { EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, realTrace, runStowage, scratchDir, SMALL_TRACE, writeSmallRmmLog, writeSmallTrace } from './runStowage.js';

describe('stowage trace', function () {
  this.timeout(60_000);
  const dir = scratchDir();
  const trace = writeSmallTrace(dir);

  it('writes allocator events in the Trace Event Format with --chrome: a memory counter, one slice per allocation, segments as instants', () => {
    const out = join(dir, 'chrome.json');
    const run = runStowage(['trace', trace, '--chrome', '--replay', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const chrome = JSON.parse(readFileSync(out, 'utf8')) as ChromeTrace;
    const events = chrome.traceEvents;
    expect(events.filter((e) => e.ph === 'b')).to.have.length(3);
    expect(events.filter((e) => e.ph === 'e')).to.have.length(2); // the trace frees two; the third is live at its end
    expect(events.filter((e) => e.ph === 'i' && e.cat === 'segment')).to.have.length(2);
    const counters = events.filter((e) => e.ph === 'C');
    expect(Math.max(...counters.map((e) => Number(e.args!.reserved)))).to.equal(22 << 20);
    expect(events.every((e) => typeof e.ts === 'number' && typeof e.pid === 'number' && typeof e.tid === 'number')).to.equal(true);
  });

  it("keeps the trace's own times without --replay", () => {
    const run = runStowage(['trace', trace, '--chrome']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const chrome = JSON.parse(run.stdout) as ChromeTrace;
    expect(chrome.otherData.timestamps).to.match(/microseconds/);
    expect(chrome.traceEvents.filter((e) => e.ph === 'b').map((e) => e.ts)).to.deep.equal([0, 10, 20]);
  });

  it('converts an RMM CSV log to JSON lines that readTrace reads back', async () => {
    const out = join(dir, 'from-rmm.jsonl');
    const run = runStowage(['trace', writeSmallRmmLog(dir), '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const events = await readTrace(out);
    expect(events.map((e) => e.action)).to.deep.equal(['alloc', 'alloc', 'alloc', 'free_requested', 'free_requested']);
    expect(events.map((e) => e.size)).to.deep.equal([SMALL_TRACE[0]!.size, 1000, 4096, 1000, SMALL_TRACE[0]!.size]);
  });

  it('lists a trace readably with --list: named allocations in the segments the trace reserved, frees, cudaMalloc and cudaFree', function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const run = runStowage(['trace', trace, '--list']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const lines = run.stdout.trimEnd().split('\n');
    expect(lines[0]).to.equal('opt125m_zeroth_order_fedlearn_fromstart, device 0: 23105 entries');
    expect(lines.length).to.equal(23105 + 2);
    expect(lines[1]).to.match(/^\s+0 {2}s0 = cudaMalloc\(148\.00 MiB\) at 0x[0-9a-f]+$/);
    expect(lines[2]).to.match(/^\s+1 {2}a = alloc 147\.28 MiB in s0 at \+0x0$/);
    expect(run.stdout).to.match(/^\s+\d+ {2}del a \(147\.28 MiB\)$/m);
    expect(run.stdout).to.match(/^\s+\d+ {2}free completed: a's block may be reused$/m);
    expect(lines.at(-1)).to.match(/^live at the end: \d+ allocations, .* requested; the trace's segments net 1\.77 GiB reserved$/);
  });

  it("lists a PyTorch snapshot's trace, placing allocations in the snapshot's segments, and a replay's own entries with --replay", function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const run = runStowage(['trace', pickle, '--list']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.match(/^cs336_small_ctx256_b32_fwdbwd_windows, device 0: \d+ entries$/m);
    expect(run.stdout).to.match(/^\s+0 {2}a = alloc .* in seg#\d+ at \+0x[0-9a-f]+$/m);
    const replayed = runStowage(['trace', writeSmallTrace(dir), '--list', '--replay']);
    expect(replayed.stdout).to.match(/s0 = cudaMalloc\(20\.00 MiB\)/);
    expect(replayed.stdout).to.match(/a = alloc 3\.00 MiB in s0 at \+0x0/);
  });

  it('refuses --list with --chrome, exit 2', () => {
    expectCleanFailure(runStowage(['trace', trace, '--list', '--chrome']), EXIT.usage, /--list must be left out with --chrome/);
  });

  it('refuses a file of another format, exit 3, no stack trace', () => {
    const run = runStowage(['trace', join(dir, '..'), '--chrome']);
    expectCleanFailure(run, EXIT.input, /is not a trace .*: it is a directory/);
  });
});
