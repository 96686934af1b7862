import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { MemorySnapshot } from '@stowage/core';
import { EXIT } from '@stowage/cli';
import { expectCleanFailure, runStowage, scratchDir } from './runStowage.js';

describe('stowage demo', function () {
  this.timeout(120_000);

  it("runs the README's main job: the training loop under LMS, then the composition demo", () => {
    const run = runStowage(['demo', '--model', 'mlp', '--steps', '2'], { timeoutMs: 110_000 });
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(run.stdout).to.match(/LMS/);
    expect(run.stdout).to.match(/Stowage demo/);
  });

  it('refuses a model, policy or step count the training loop does not take, naming the choices, exit 2', () => {
    expectCleanFailure(runStowage(['demo', '--model', 'nonesuch']), EXIT.usage, /'nonesuch' is invalid. Allowed choices are transformer, mlp/);
    expectCleanFailure(runStowage(['demo', '--steps', '0']), EXIT.usage, /Expected a whole number of at least 1/);
  });

  it('records the run under LMS with --record, and the Chrome export and the page mark its page-outs and page-ins', () => {
    const dir = scratchDir();
    const recording = join(dir, 'run.json');
    const run = runStowage(['demo', '--model', 'mlp', '--steps', '2', '--skip-composition', '--record', recording], { timeoutMs: 110_000 });
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const entries = (JSON.parse(readFileSync(recording, 'utf8')) as MemorySnapshot).device_traces[0]!;
    const pageOuts = entries.filter((e) => (e.action as string) === 'page_out').length;
    expect(pageOuts).to.be.greaterThan(0);
    expect(entries.filter((e) => (e.action as string) === 'page_in').length).to.be.greaterThan(0);
    const chrome = JSON.parse(runStowage(['trace', recording, '--chrome']).stdout) as { traceEvents: { cat?: string; name: string }[] };
    expect(chrome.traceEvents.filter((e) => e.cat === 'lms' && e.name.startsWith('page_out')).length).to.equal(pageOuts);
    const page = runStowage(['--json', 'viz', recording, '-o', join(dir, 'run.html')]);
    expect(page.status, page.stderr).to.equal(EXIT.ok);
    expect(JSON.parse(page.stdout)).to.include({ entries: entries.length });
    expect(readFileSync(join(dir, 'run.html'), 'utf8')).to.include('"page_out"');
  });

  it('refuses a --record in a directory that does not exist before training, exit 2, one line', () => {
    const run = runStowage(['demo', '--model', 'mlp', '--steps', '1', '--record', join('no-such-dir', 'run.json')]);
    expectCleanFailure(run, EXIT.usage, /^stowage: --record must be a file in an existing, writable directory \(no directory .*no-such-dir\); got "no-such-dir\/run\.json"\. \[INVALID_ARGUMENT\]\n$/);
    expect(run.stdout, 'the training loop ran').to.equal('');
  });

  it('refuses a flag it does not know, exit 2', () => {
    expectCleanFailure(runStowage(['demo', '--fast']), EXIT.usage, /unknown option '--fast'/);
  });
});
