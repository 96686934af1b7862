import { expect } from 'chai';
import { EXIT } from '@stowage/cli';
import { expectCleanFailure, runStowage } from './runStowage.js';

describe('stowage bench', function () {
  this.timeout(120_000);

  it("lists the root package.json's bench:* scripts", () => {
    const run = runStowage(['--json', 'bench', '--list']);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const names = (JSON.parse(run.stdout) as { name: string }[]).map((b) => b.name);
    expect(names).to.include.members(['engine', 'lms', 'cow', 'ipc', 'webgpu']);
  });

  it('builds and runs a bench, passing the flags after -- on to it', () => {
    const run = runStowage(['bench', 'engine', '--', '--quick', '--trace', 'cs336_forward_fp32_ctx128_b', '--allocator', 'caching-pytorch'], { timeoutMs: 110_000 });
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const lines = run.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.at(-1)).to.have.property('scenario', 'environment');
  });

  it('refuses an unknown bench, naming the nearest and the known ones, exit 2', () => {
    expectCleanFailure(runStowage(['bench', 'engin']), EXIT.usage, /bench name must be 'engine' \(the nearest name\) or one of .*lms/);
  });
});
