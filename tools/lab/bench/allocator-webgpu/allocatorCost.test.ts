import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { findTraceRoot } from '@stowage/lab/replay';

const bench = fileURLToPath(new URL('./allocatorCost.bench.js', import.meta.url));

describe('allocatorCost.bench --node-flag', () => {
  it('passes a V8 flag that prints to stdout (--trace-gc) to the runs without mistaking its output for pass lines', function () {
    this.timeout(60_000);
    if (findTraceRoot() === undefined) {
      console.log('    skipped: the bench replays a recorded trace, and neither ../shared/traces nor $STOWAGE_TRACES was found');
      this.skip();
    }
    const run = spawnSync(process.execPath, [bench, '--trace', 'resnet18', '--repeats', '1', '--passes', '1', '--node-flag=--trace-gc'], { encoding: 'utf8' });
    expect(run.stderr, 'stderr').to.not.match(/SyntaxError/);
    expect(run.status, run.stderr).to.equal(0);
    const summary = run.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { scenario?: string; nsPerOpRatio?: number[] })
      .find((l) => l.scenario === 'summary');
    expect(summary?.nsPerOpRatio).to.have.length(1);
  });
});
