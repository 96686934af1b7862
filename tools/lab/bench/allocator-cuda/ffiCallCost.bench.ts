// The cost of one driver call through koffi, on the stand-in libcuda (or a real libcuda when STOWAGE_LIBCUDA
// points at one). One JSON line per call shape, then the environment:
// - raw cuCtxGetCurrent: koffi's own cost for a call with one out-parameter (the driver does a thread-local read);
// - raw cuStreamQuery(NULL): a call with one pointer argument and no out-parameter;
// - CudaDriver#hasCurrentContext and #streamQuery: the same through the typed methods (result check included).
// Run: pnpm bench:cuda-ffi
import os from 'node:os';

import { CudaDriver } from '@stowage/allocator-cuda';
import { buildStandIn } from '@stowage/allocator-cuda/testing';
import { timePerCall } from '@stowage/lab/bench-kit';

function openDriver(): CudaDriver {
  const chosen = process.env['STOWAGE_LIBCUDA'];
  if (chosen !== undefined && chosen !== '') return CudaDriver.open({ paths: [chosen] });
  const build = buildStandIn();
  if (build.path === null) throw new Error(`the stand-in libcuda could not be built: ${build.reason}`);
  return CudaDriver.open({ paths: [build.path] });
}

const driver = openDriver();
driver.init();
driver.setCurrentContext(driver.retainPrimaryContext(driver.device(0)));

const ctxGetCurrent = driver.raw('cuCtxGetCurrent');
const streamQuery = driver.raw('cuStreamQuery');
const out: unknown[] = [null];

const rows: [string, () => void][] = [
  ['raw cuCtxGetCurrent', () => void ctxGetCurrent(out)],
  ['raw cuStreamQuery(NULL)', () => void streamQuery(null)],
  ['CudaDriver#hasCurrentContext', () => void driver.hasCurrentContext()],
  ['CudaDriver#streamQuery(null)', () => void driver.streamQuery(null)],
];
for (const [call, run] of rows) {
  console.log(JSON.stringify({ scenario: 'ffiCallCost', call, nsPerCall: Number(timePerCall(run).toFixed(1)), library: driver.path }));
}
console.log(JSON.stringify({ scenario: 'environment', node: process.version, koffi: (await import('koffi')).default.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() }));
