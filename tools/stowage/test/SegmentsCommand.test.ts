import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { readSnapshotPickle } from '@stowage/snapshot-pickle';
import { EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, flameBoxes, runStowage, scratchDir, writeSmallTrace } from './runStowage.js';

describe('stowage segments', function () {
  this.timeout(60_000);
  const dir = scratchDir();

  it("draws a PyTorch snapshot's segments as a flame graph SVG: stream, segment, block state, widths in bytes", function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const out = join(dir, 'segments.svg');
    const run = runStowage(['segments', pickle, '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const svg = readFileSync(out, 'utf8');
    expect(svg).to.match(/^<\?xml/);
    expect(svg).not.to.match(/\b(src|href)=/);
    const reserved = readSnapshotPickle(readFileSync(pickle)).segments.reduce((n, s) => n + s.total_size, 0);
    expect(svg).to.include(`data-total-bytes="${reserved}"`);
    const boxes = flameBoxes(svg);
    expect(boxes.find((b) => b.depth === 0)).to.deep.include({ name: 'all', bytes: reserved });
    expect(boxes.filter((b) => b.depth === 1).map((b) => b.name)).to.deep.equal(['stream 0']);
    const segments = boxes.filter((b) => b.depth === 2);
    expect(segments.length).to.be.greaterThan(100); // of 216: the narrowest (under a third of a pixel) are not drawn
    expect(segments.every((b) => /^segment 0x[0-9a-f]+ \(/.test(b.name))).to.equal(true);
    expect(new Set(boxes.filter((b) => b.depth === 3).map((b) => b.name))).to.deep.equal(new Set(['allocated', 'free']));
    expect(run.stdout).to.match(/216 segments, 13\.21 GiB reserved/);
  });

  it('replays a trace to its end first, and writes to standard output for -o -', () => {
    const run = runStowage(['segments', writeSmallTrace(dir), '-o', '-']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.include(`data-total-bytes="${22 << 20}"`); // a 20 MiB and a 2 MiB segment
    expect(flameBoxes(run.stdout).filter((b) => b.depth === 2)).to.have.length(2);
  });

  it('refuses an output in a directory that does not exist before reading, exit 2', () => {
    expectCleanFailure(runStowage(['segments', join(dir, 'none.pickle'), '-o', join(dir, 'no', 'x.svg')]), EXIT.usage, /-o must be a file in an existing, writable directory/);
  });
});
