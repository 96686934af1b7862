import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { MemorySnapshot } from '@stowage/core';
import { readSnapshotPickle } from '@stowage/snapshot-pickle';
import { EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, runStowage, scratchDir, writeSmallTrace } from './runStowage.js';

describe('stowage snapshot', function () {
  this.timeout(60_000);
  const dir = scratchDir();
  const trace = writeSmallTrace(dir);

  it("writes the allocator's snapshot after a chosen event as JSON, with the trace up to it", () => {
    const out = join(dir, 'at2.json');
    const run = runStowage(['snapshot', trace, '--at', '2', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.match(/after event 2 of 7/);
    const snapshot = JSON.parse(readFileSync(out, 'utf8')) as MemorySnapshot;
    expect(snapshot.segments.map((s) => s.total_size).sort((a, b) => a - b)).to.deep.equal([2 << 20, 20 << 20]);
    const states = snapshot.segments.flatMap((s) => s.blocks.map((b) => b.state));
    expect(states.filter((s) => s === 'active_allocated')).to.have.length(3);
    expect(snapshot.device_traces[0]!.filter((e) => e.action === 'alloc')).to.have.length(3);
  });

  it('stops at the peak of live bytes by default and writes a pickle for a .pickle output', () => {
    const out = join(dir, 'peak.pickle');
    const run = runStowage(['--json', 'snapshot', trace, '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(run.stdout)).to.include({ format: 'pickle', event: 2, segments: 2 });
    const snapshot = readSnapshotPickle(readFileSync(out));
    expect(snapshot.segments).to.have.length(2);
  });

  it("re-exports a PyTorch snapshot pickle's replay as a pickle that Python's pickle loads with PyTorch's structure", function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const out = join(dir, 'example.pickle');
    const run = runStowage(['snapshot', pickle, '--replay', '--at', 'end', '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const script = [
      'import pickle, sys',
      'mine = pickle.load(open(sys.argv[1], "rb")); theirs = pickle.load(open(sys.argv[2], "rb"))',
      'print(sorted(mine) == sorted(theirs), sorted(mine["segments"][0]) == sorted(theirs["segments"][0]),',
      '      sorted(mine["segments"][0]["blocks"][0]) == sorted(theirs["segments"][0]["blocks"][0]),',
      '      sorted(mine["device_traces"][0][0]) == sorted(theirs["device_traces"][0][0]), len(mine["device_traces"][0]) > 0)',
    ].join('\n');
    let output: string;
    try {
      output = execFileSync('python3', ['-c', script, out, pickle], { encoding: 'utf8' });
    } catch (error) {
      console.log(`    skipped: python3 did not run (${(error as Error).message.split('\n')[0]})`);
      this.skip();
    }
    expect(output.trim()).to.equal('True True True True True');
  });

  it("refuses an --at past the trace's end, naming its length, exit 2", () => {
    expectCleanFailure(runStowage(['snapshot', trace, '--at', '99', '-o', join(dir, 'x.json')]), EXIT.usage, /--at must be an event index below 7/);
    expectCleanFailure(runStowage(['snapshot', trace, '--at', 'top', '-o', join(dir, 'x.json')]), EXIT.usage, /--at must be an event index/);
  });

  it('refuses a missing file, exit 3, no stack trace', () => {
    expectCleanFailure(runStowage(['snapshot', join(dir, 'nope.pickle')]), EXIT.input, /No file at .*nope\.pickle/);
  });
});
