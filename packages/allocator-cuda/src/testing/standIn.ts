import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import koffi from 'koffi';

const packageRoot = fileURLToPath(new URL('../../', import.meta.url));

/** The stand-in's C source, in the package. */
export const STAND_IN_SOURCE = join(packageRoot, 'native', 'standin', 'libcuda_standin.c');

/** Where {@link buildStandIn} writes the library (ignored by git). */
export const STAND_IN_LIBRARY = join(packageRoot, 'native', 'build', 'libcuda.so.1');

/** The stand-in library's path, or why it could not be built. */
export type StandInBuild = { readonly path: string } | { readonly path: null; readonly reason: string };

/** Directories searched for the toolkit's cuda.h: `$CUDA_HOME/include`, `$CUDA_PATH/include`, /usr/local/cuda/include. */
function cudaIncludeDir(env: NodeJS.ProcessEnv): string | null {
  const roots = [env['CUDA_HOME'], env['CUDA_PATH'], '/usr/local/cuda'].filter((r): r is string => r !== undefined && r !== '');
  for (const root of roots) {
    if (existsSync(join(root, 'include', 'cuda.h'))) return join(root, 'include');
  }
  return null;
}

/**
 * Compiles the stand-in libcuda (native/standin/libcuda_standin.c) with the machine's C compiler (`$CC`, else
 * `cc`) against the toolkit's cuda.h, unless the library is newer than the source. Returns the library's path,
 * or the reason it could not be built (no compiler, no cuda.h, a compile error) so a test can skip saying why.
 */
export function buildStandIn(env: NodeJS.ProcessEnv = process.env): StandInBuild {
  if (existsSync(STAND_IN_LIBRARY) && statSync(STAND_IN_LIBRARY).mtimeMs >= statSync(STAND_IN_SOURCE).mtimeMs) {
    return { path: STAND_IN_LIBRARY };
  }
  const compiler = env['CC'] ?? 'cc';
  const include = cudaIncludeDir(env);
  if (include === null) {
    return { path: null, reason: 'no cuda.h found in $CUDA_HOME/include, $CUDA_PATH/include or /usr/local/cuda/include' };
  }
  mkdirSync(join(packageRoot, 'native', 'build'), { recursive: true });
  // Build beside the target and rename, so a concurrent test process never loads a half-written library.
  const partial = `${STAND_IN_LIBRARY}.${process.pid}.partial`;
  const args = ['-shared', '-fPIC', '-O2', '-pthread', '-Wall', `-I${include}`, STAND_IN_SOURCE, '-o', partial];
  const run = spawnSync(compiler, args, { encoding: 'utf8' });
  if (run.error !== undefined) return { path: null, reason: `no C compiler (${compiler}): ${run.error.message}` };
  if (run.status !== 0) return { path: null, reason: `${compiler} ${args.join(' ')} failed: ${run.stderr}` };
  renameSync(partial, STAND_IN_LIBRARY);
  return { path: STAND_IN_LIBRARY };
}

/**
 * The stand-in's test hooks, bound from the same library the driver loaded (the dynamic loader hands both the
 * same copy, so they share its state).
 */
export class StandInHooks {
  readonly #injectError: (call: string, result: number, countdown: number) => void;
  readonly #delayStream: (stream: unknown, microseconds: number) => number;
  readonly #setCapacity: (bytes: number) => void;

  /** The hooks of the library at `path`, or null when it has none (a real libcuda). */
  static open(path: string): StandInHooks | null {
    try {
      return new StandInHooks(path);
    } catch {
      return null;
    }
  }

  private constructor(path: string) {
    const lib = koffi.load(path);
    this.#injectError = lib.func('standinInjectError', 'void', ['str', 'int', 'int']) as (call: string, result: number, countdown: number) => void;
    this.#delayStream = lib.func('standinDelayStream', 'int', ['void *', 'uint']) as (stream: unknown, microseconds: number) => number;
    this.#setCapacity = lib.func('standinSetCapacity', 'void', ['size_t']) as (bytes: number) => void;
  }

  /** The `countdown`-th next call of driver function `call` (0: the very next) returns `result` once. */
  injectError(call: string, result: number, countdown = 0): void {
    this.#injectError(call, result, countdown);
  }

  /** Cancels a pending injection. */
  clearInjectedError(): void {
    this.#injectError('', 0, -1);
  }

  /** The stream's worker sleeps this long before running its next queued operation. */
  delayStream(stream: { readonly handle: unknown }, microseconds: number): void {
    const result = this.#delayStream(stream.handle, microseconds);
    if (result !== 0) throw new Error(`standinDelayStream failed with CUresult ${result}`);
  }

  /** Sets the device capacity in bytes (what cuMemGetInfo_v2 reports as total). */
  setCapacity(bytes: number): void {
    this.#setCapacity(bytes);
  }
}
