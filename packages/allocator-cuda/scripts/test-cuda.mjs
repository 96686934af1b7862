/* global process, console */
// pnpm test:cuda — the CUDA tests on a real driver: the allocator's tests, LMS on CUDA, the training loop on CUDA and
// the stand-in's comparison with the driver (StandInParity), with STOWAGE_LIBCUDA set to the real libcuda. Fails when
// no real libcuda loads (on a machine without a GPU, `pnpm test` runs the same tests on the stand-in).
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

import { CudaDriver, DEFAULT_LIBCUDA_PATHS } from '@stowage/allocator-cuda';
import { StandInHooks } from '@stowage/allocator-cuda/testing';

const chosen = process.env.STOWAGE_LIBCUDA;
let driver;
try {
  driver = CudaDriver.open({ paths: chosen ? [chosen] : DEFAULT_LIBCUDA_PATHS });
  driver.init();
} catch (error) {
  console.error(`pnpm test:cuda needs a real libcuda and a GPU: ${error.message}`);
  process.exit(1);
}
if (StandInHooks.open(driver.path) !== null) {
  console.error(`${driver.path} is the stand-in libcuda; pnpm test:cuda is for a real driver (pnpm test runs the stand-in).`);
  process.exit(1);
}
console.log(`Real CUDA driver ${driver.driverVersion()} at ${driver.path}: ${driver.deviceCount()} device(s), ${driver.deviceName(driver.device(0))}.`);
const specs = ['packages/allocator-cuda/dist-test/*.test.js', 'packages/lms/dist-test/LmsCuda.test.js', 'examples/train/dist-test/lmsTraining.test.js', 'examples/train/dist-test/cudaHostOps.test.js'];
// mocha through this node, not `pnpm exec`: a GPU machine may have node but no pnpm.
const mocha = createRequire(import.meta.url).resolve('mocha/bin/mocha.js');
const run = spawnSync(process.execPath, [mocha, '--no-config', '--require', 'reflect-metadata', '--timeout', '600000', ...(process.argv.slice(2)), ...specs], {
  stdio: 'inherit',
  env: { ...process.env, STOWAGE_LIBCUDA: driver.path, STOWAGE_STANDIN_PARITY: '1' },
});
process.exit(run.status ?? 1);
