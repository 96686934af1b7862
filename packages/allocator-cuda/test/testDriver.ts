import type { CudaContext } from '@stowage/allocator-cuda/driver';
import { CudaDriver, DEFAULT_LIBCUDA_PATHS } from '@stowage/allocator-cuda';
import { buildStandIn, StandInHooks } from '@stowage/allocator-cuda/testing';

/** The driver the tests run on: a real libcuda when one loads, else the stand-in; hooks only on the stand-in. */
export interface TestDriver {
  readonly driver: CudaDriver;
  readonly context: CudaContext;
  readonly hooks: StandInHooks | null;
}

/**
 * Opens the driver for a test file, or returns why it cannot (the caller skips with that message).
 * `STOWAGE_LIBCUDA` set: that library (hooks when it exports the stand-in's). Unset: a real libcuda if one loads,
 * otherwise the stand-in, built here.
 */
export function openTestDriver(): TestDriver | string {
  let driver: CudaDriver;
  const chosen = process.env['STOWAGE_LIBCUDA'];
  if (chosen !== undefined && chosen !== '') {
    driver = CudaDriver.open({ paths: [chosen] });
  } else {
    try {
      driver = CudaDriver.open({ paths: DEFAULT_LIBCUDA_PATHS });
    } catch {
      const build = buildStandIn();
      if (build.path === null) return `the stand-in libcuda could not be built: ${build.reason}`;
      driver = CudaDriver.open({ paths: [build.path] });
    }
  }
  driver.init();
  const context = driver.retainPrimaryContext(driver.device(0));
  driver.setCurrentContext(context);
  return { driver, context, hooks: StandInHooks.open(driver.path) };
}

/** What `fn` threw; fails the test when it returns normally. */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to throw');
}

/** `bytes` bytes of a pattern that differs with `seed`. */
export function pattern(bytes: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: bytes }, (_, i) => (i * 31 + seed) & 0xff);
}

/** Skips the calling test, printing why (a test the real driver cannot run, or a capability it lacks). */
export function skipBecause(ctx: Mocha.Context, reason: string): never {
  console.log(`      skipped: ${reason}`);
  return ctx.skip();
}

/** The stand-in's hooks; skips the test, saying so, on a real driver (which has none). */
export function standInHooks(ctx: Mocha.Context, t: TestDriver): StandInHooks {
  if (t.hooks === null) skipBecause(ctx, "needs the stand-in libcuda's test hooks; running on a real driver");
  return t.hooks!;
}
