import { CudaDriver, DEFAULT_LIBCUDA_PATHS } from '../driver/CudaDriver.js';
import { buildStandIn, StandInHooks } from './standIn.js';

/** The libcuda a test runs on, and the stand-in's hooks when it is the stand-in (null on a real driver). */
export interface TestLibcuda {
  readonly path: string;
  readonly hooks: StandInHooks | null;
}

/**
 * The libcuda the CUDA tests and benches run on: `STOWAGE_LIBCUDA` when set; otherwise a real libcuda when one loads;
 * otherwise the stand-in, built here (memory calls and copies, no kernels). A string says why none can be had (no
 * driver, and no C compiler for the stand-in): the caller skips saying so.
 */
export function testLibcuda(env: NodeJS.ProcessEnv = process.env): TestLibcuda | string {
  const chosen = env['STOWAGE_LIBCUDA'];
  let path: string;
  if (chosen !== undefined && chosen !== '') {
    path = chosen;
  } else {
    try {
      path = CudaDriver.open({ paths: DEFAULT_LIBCUDA_PATHS }).path;
    } catch {
      const build = buildStandIn(env);
      if (build.path === null) return `no libcuda could be loaded, and the stand-in could not be built: ${build.reason}`;
      path = build.path;
    }
  }
  return { path, hooks: StandInHooks.open(path) };
}
