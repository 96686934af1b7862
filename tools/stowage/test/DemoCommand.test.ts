import { expect } from 'chai';
import { EXIT } from '@stowage/cli';
import { expectCleanFailure, runStowage } from './runStowage.js';

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

  it('refuses a flag it does not know, exit 2', () => {
    expectCleanFailure(runStowage(['demo', '--fast']), EXIT.usage, /unknown option '--fast'/);
  });
});
