import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { expect } from 'chai';
import { buildStandIn, StandInHooks } from '@stowage/allocator-cuda/testing';

/** The outcomes StandInParityScript prints for one libcuda. */
function outcomesOn(library: string): [string, unknown, string?][] {
  const script = fileURLToPath(new URL('./StandInParityScript.js', import.meta.url));
  const run = spawnSync(process.execPath, [script], { env: { ...process.env, STOWAGE_LIBCUDA: library }, encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`the parity script failed on ${library}: ${run.stderr}`);
  return JSON.parse(run.stdout) as [string, unknown, string?][];
}

/** Whether a step's outcomes agree: the same answer, or a refusal where the script marks the stand-in stricter by design and the driver tolerated the call. */
function agree([, onDriver, stricter]: [string, unknown, string?], onStandIn: unknown): boolean {
  if (JSON.stringify(onDriver) === JSON.stringify(onStandIn)) return true;
  return stricter !== undefined && onDriver === 'ok' && typeof onStandIn === 'string' && onStandIn.startsWith('CUDA_ERROR_');
}

/**
 * The stand-in answers the calls it implements as the real driver does: the same script of calls (successes,
 * refusals, VMM and IPC corner cases) on both, compared step by step. Runs under `pnpm test:cuda`, on a machine with
 * a GPU (STOWAGE_LIBCUDA names the real driver, STOWAGE_STANDIN_PARITY=1).
 */
describe('The stand-in libcuda against the real driver', function () {
  this.timeout(120_000);
  it('gives the same outcome as the driver on every call of the parity script, or a refusal where it is stricter by design', function () {
    const real = process.env['STOWAGE_LIBCUDA'];
    if (process.env['STOWAGE_STANDIN_PARITY'] !== '1' || real === undefined || real === '' || StandInHooks.open(real) !== null) {
      console.log('    skipped: needs a real libcuda (pnpm test:cuda on a machine with a GPU)');
      return this.skip();
    }
    const build = buildStandIn();
    if (build.path === null) {
      console.log(`    skipped: the stand-in libcuda could not be built: ${build.reason}`);
      return this.skip();
    }
    const onDriver = outcomesOn(real);
    const onStandIn = outcomesOn(build.path);
    const differences = onDriver.flatMap((driverStep, i) => (agree(driverStep, onStandIn[i]?.[1]) ? [] : [`${driverStep[0]}: driver ${JSON.stringify(driverStep[1])}, stand-in ${JSON.stringify(onStandIn[i]?.[1])}`]));
    expect(differences, 'steps where the stand-in differs from the driver').to.deep.equal([]);
  });
});
