import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { SnapshotComparison } from '@stowage/cli';
import { EXIT } from '@stowage/cli';
import { expectCleanFailure, flameBoxes, realTrace, runStowage, scratchDir, writeSmallTrace } from './runStowage.js';

describe('stowage compare', function () {
  this.timeout(120_000);
  const dir = scratchDir();

  it("diffs two snapshots' segments: those each has alone, and both sides' figures", function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const early = join(dir, 'early.json');
    const peak = join(dir, 'peak.json');
    expect(runStowage(['snapshot', trace, '--at', '2000', '-o', early]).status).to.equal(EXIT.ok);
    expect(runStowage(['snapshot', trace, '--at', 'peak', '-o', peak]).status).to.equal(EXIT.ok);
    const run = runStowage(['--json', 'compare', early, peak]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const comparison = JSON.parse(run.stdout) as SnapshotComparison;
    expect(comparison.onlyAfter.length).to.be.greaterThan(0);
    expect(comparison.inBoth + comparison.onlyBefore.length).to.equal(comparison.before.segments);
    expect(comparison.inBoth + comparison.onlyAfter.length).to.equal(comparison.after.segments);
    const text = runStowage(['compare', early, peak]);
    expect(text.stdout).to.match(/segments\s+\d+\s+\d+\s+\+\d+/);
    expect(text.stdout).to.include(`${comparison.onlyAfter.length} segment${comparison.onlyAfter.length === 1 ? '' : 's'} only after`);
  });

  it('draws the segments only one side has as a flame graph with -o, and compares a snapshot with itself as equal', function () {
    const trace = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
    if (trace === undefined) this.skip();
    const svg = join(dir, 'compare.svg');
    const run = runStowage(['--json', 'compare', trace, trace, '-a', 'best', '-o', svg]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(run.stdout)).to.deep.include({ onlyBefore: [], onlyAfter: [] });
    expect(readFileSync(svg, 'utf8')).to.include('Nothing to draw');
    const early = join(dir, 'early.json');
    const diff = join(dir, 'diff.svg');
    expect(runStowage(['compare', early, join(dir, 'peak.json'), '-o', diff]).status).to.equal(EXIT.ok);
    expect(flameBoxes(readFileSync(diff, 'utf8')).filter((b) => b.depth === 1).map((b) => b.name)).to.include('only after');
  });

  it('says in one message, exit 4, that both replays ran out of memory', () => {
    const small = writeSmallTrace(dir);
    const run = runStowage(['compare', small, small, '--limit', '2MiB']);
    expectCleanFailure(run, EXIT.outOfMemory, /^stowage: the replay of small ran out of memory at event 0 of 7;.*\n {2}The replay of small ran out of memory too, at event 0 of 7\.\n$/);
    expect(run.stderr.match(/^stowage: /gm)).to.have.length(1);
  });

  it('refuses a missing input, exit 3', () => {
    expectCleanFailure(runStowage(['compare', join(dir, 'a.json'), join(dir, 'b.json')]), EXIT.input, /No file at .*a\.json/);
  });

  it('reads both inputs before replaying either: an unreadable second input is the one message, though the first would run out of memory', () => {
    const small = writeSmallTrace(dir);
    const empty = join(dir, 'empty.jsonl');
    writeFileSync(empty, '');
    const run = runStowage(['compare', small, empty, '--capacity', '2MiB']);
    expect(run.stderr).to.include('empty.jsonl is not a trace');
    expect(run.stderr, 'no replay ran').not.to.include('ran out of memory');
    expect(run.stderr.match(/^stowage: /gm)).to.have.length(1);
    expect(run.status).to.not.equal(EXIT.ok);
  });
});
