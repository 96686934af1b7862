import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { EXIT } from '@stowage/cli';
import { examplePickle, flameBoxes, runStowage, scratchDir } from './runStowage.js';

describe('stowage memory', function () {
  this.timeout(60_000);

  it('draws the memory of a snapshot as a flame graph by stream, state and stack, segments merged', function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const out = join(scratchDir(), 'memory.svg');
    const run = runStowage(['memory', pickle, '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const boxes = flameBoxes(readFileSync(out, 'utf8'));
    const states = boxes.filter((b) => b.depth === 2);
    expect(states.map((b) => b.name).sort()).to.deep.equal(['allocated', 'free']);
    expect(boxes.some((b) => b.name.startsWith('segment '))).to.equal(false);
    // Every byte reserved is drawn: the states sum to the root.
    expect(states.reduce((n, b) => n + b.bytes, 0)).to.equal(boxes.find((b) => b.depth === 0)!.bytes);
  });
});
