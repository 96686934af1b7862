import { DEFAULT_LIBCUDA_PATHS, CudaDriver } from '@stowage/allocator-cuda';
import { buildStandIn, StandInHooks } from '@stowage/allocator-cuda/testing';

/** The libcuda the allocator's tests run on, and the stand-in's hooks when it is the stand-in. */
export interface TestLibrary {
  readonly path: string;
  readonly hooks: StandInHooks | null;
}

/**
 * `STOWAGE_LIBCUDA` when set; otherwise a real libcuda when one loads; otherwise the stand-in, built here. A string
 * says why none can be had (the caller skips with it).
 */
export function testLibrary(): TestLibrary | string {
  const chosen = process.env['STOWAGE_LIBCUDA'];
  let path: string;
  if (chosen !== undefined && chosen !== '') {
    path = chosen;
  } else {
    try {
      const real = CudaDriver.open({ paths: DEFAULT_LIBCUDA_PATHS });
      path = real.path;
    } catch {
      const build = buildStandIn();
      if (build.path === null) return `the stand-in libcuda could not be built: ${build.reason}`;
      path = build.path;
    }
  }
  return { path, hooks: StandInHooks.open(path) };
}
