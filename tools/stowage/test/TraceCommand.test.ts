import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { readTrace } from '@stowage/lab/replay';
import type { ChromeTrace } from '@stowage/cli';
import { EXIT } from '@stowage/cli';
import { expectCleanFailure, runStowage, scratchDir, SMALL_TRACE, writeSmallRmmLog, writeSmallTrace } from './runStowage.js';

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

  it('refuses a file of another format, exit 3, no stack trace', () => {
    const run = runStowage(['trace', join(dir, '..'), '--chrome']);
    expectCleanFailure(run, EXIT.input, /is not a trace .*: it is a directory/);
  });
});
