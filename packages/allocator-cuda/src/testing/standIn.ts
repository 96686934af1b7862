import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import koffi from 'koffi';

const packageRoot = fileURLToPath(new URL('../../', import.meta.url));

/** The stand-in's C source, in the package. */
export const STAND_IN_SOURCE = join(packageRoot, 'native', 'standin', 'libcuda_standin.c');

/** The part of cuda.h the stand-in needs, used when the toolkit's cuda.h is missing (or when asked for). */
export const STAND_IN_FALLBACK_HEADER = join(packageRoot, 'native', 'standin', 'cuda_fallback.h');

/** A program printing the ABI facts (sizes, offsets, enum values) the stand-in relies on, one per line. */
export const STAND_IN_ABI_CHECK_SOURCE = join(packageRoot, 'native', 'standin', 'abi_check.c');

/** Where {@link buildStandIn} writes the library (ignored by git). */
export const STAND_IN_LIBRARY = join(packageRoot, 'native', 'build', 'libcuda.so.1');

/** Where {@link buildStandIn} writes the library when `fallbackHeader` is forced (ignored by git). */
export const STAND_IN_FALLBACK_LIBRARY = join(packageRoot, 'native', 'build', 'fallback', 'libcuda.so.1');

/** The stand-in library's path, or why it could not be built. */
export type StandInBuild = { readonly path: string } | { readonly path: null; readonly reason: string };

export interface BuildStandInOptions {
  /**
   * Compile against native/standin/cuda_fallback.h even when a toolkit cuda.h exists, into
   * {@link STAND_IN_FALLBACK_LIBRARY}. Without it the fallback header is used only when no cuda.h is found.
   */
  readonly fallbackHeader?: boolean;
}

/** Directories searched for the toolkit's cuda.h: `$CUDA_HOME/include`, `$CUDA_PATH/include`, /usr/local/cuda/include. */
export function cudaIncludeDir(env: NodeJS.ProcessEnv = process.env): string | null {
  const roots = [env['CUDA_HOME'], env['CUDA_PATH'], '/usr/local/cuda'].filter((r): r is string => r !== undefined && r !== '');
  for (const root of roots) {
    if (existsSync(join(root, 'include', 'cuda.h'))) return join(root, 'include');
  }
  return null;
}

/** The compiler's include arguments: the toolkit's cuda.h, or the fallback header when forced or when there is none. */
function headerArgs(env: NodeJS.ProcessEnv, fallbackHeader: boolean): string[] {
  const include = fallbackHeader ? null : cudaIncludeDir(env);
  return include === null ? ['-DSTOWAGE_CUDA_FALLBACK_HEADER'] : [`-I${include}`];
}

function newestSourceMtimeMs(): number {
  return Math.max(statSync(STAND_IN_SOURCE).mtimeMs, statSync(STAND_IN_FALLBACK_HEADER).mtimeMs);
}

/**
 * Compiles the stand-in libcuda (native/standin/libcuda_standin.c) with the machine's C compiler (`$CC`, else
 * `cc`) against the toolkit's cuda.h, or against native/standin/cuda_fallback.h when there is no cuda.h or
 * `options.fallbackHeader` is set, unless the library is newer than the sources. Returns the library's path, or
 * the reason it could not be built (no compiler, a compile error) so a test can skip saying why.
 */
export function buildStandIn(env: NodeJS.ProcessEnv = process.env, options: BuildStandInOptions = {}): StandInBuild {
  const fallbackHeader = options.fallbackHeader ?? false;
  const library = fallbackHeader ? STAND_IN_FALLBACK_LIBRARY : STAND_IN_LIBRARY;
  if (existsSync(library) && statSync(library).mtimeMs >= newestSourceMtimeMs()) {
    return { path: library };
  }
  const compiler = env['CC'] ?? 'cc';
  mkdirSync(dirname(library), { recursive: true });
  // Build beside the target and rename, so a concurrent test process never loads a half-written library.
  const partial = `${library}.${process.pid}.partial`;
  const args = ['-shared', '-fPIC', '-O2', '-pthread', '-Wall', ...headerArgs(env, fallbackHeader), STAND_IN_SOURCE, '-o', partial, '-lrt'];
  const run = spawnSync(compiler, args, { encoding: 'utf8' });
  if (run.error !== undefined) return { path: null, reason: `no C compiler (${compiler}): ${run.error.message}` };
  if (run.status !== 0) return { path: null, reason: `${compiler} ${args.join(' ')} failed: ${run.stderr}` };
  renameSync(partial, library);
  return { path: library };
}

/**
 * Compiles and runs native/standin/abi_check.c against the toolkit's cuda.h (or, with `fallbackHeader`, against
 * cuda_fallback.h) and returns what it prints, or the reason it could not (no compiler, no cuda.h, an error).
 */
export function standInAbiFacts(env: NodeJS.ProcessEnv = process.env, options: BuildStandInOptions = {}): { readonly facts: string } | { readonly facts: null; readonly reason: string } {
  const fallbackHeader = options.fallbackHeader ?? false;
  if (!fallbackHeader && cudaIncludeDir(env) === null) return { facts: null, reason: 'no cuda.h found in $CUDA_HOME/include, $CUDA_PATH/include or /usr/local/cuda/include' };
  const compiler = env['CC'] ?? 'cc';
  const program = join(mkdtempSync(join(tmpdir(), 'stowage-abi-')), 'abi_check');
  const args = [...headerArgs(env, fallbackHeader), STAND_IN_ABI_CHECK_SOURCE, '-o', program];
  const build = spawnSync(compiler, args, { encoding: 'utf8' });
  if (build.error !== undefined) return { facts: null, reason: `no C compiler (${compiler}): ${build.error.message}` };
  if (build.status !== 0) return { facts: null, reason: `${compiler} ${args.join(' ')} failed: ${build.stderr}` };
  const run = spawnSync(program, { encoding: 'utf8' });
  rmSync(dirname(program), { recursive: true, force: true });
  if (run.status !== 0) return { facts: null, reason: `${program} failed: ${run.stderr}` };
  return { facts: run.stdout };
}

/**
 * The stand-in's test hooks, bound from the same library the driver loaded (the dynamic loader hands both the
 * same copy, so they share its state).
 */
export class StandInHooks {
  readonly #injectError: (call: string, result: number, countdown: number) => void;
  readonly #delayStream: (stream: unknown, microseconds: number) => number;
  readonly #setCapacity: (bytes: number) => void;
  readonly #setDeviceCapacity: (device: number, bytes: number) => number;
  readonly #liveEvents: () => number;

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
    this.#setDeviceCapacity = lib.func('standinSetDeviceCapacity', 'int', ['int', 'size_t']) as (device: number, bytes: number) => number;
    this.#liveEvents = lib.func('standinLiveEvents', 'int', []) as () => number;
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

  /** Sets every device's capacity in bytes (what cuMemGetInfo_v2 reports as total). */
  setCapacity(bytes: number): void {
    this.#setCapacity(bytes);
  }

  /** Events of this process not yet destroyed (cuEventCreate and cuIpcOpenEventHandle minus cuEventDestroy_v2). */
  liveEvents(): number {
    return this.#liveEvents();
  }

  /** Sets one device's capacity in bytes. */
  setDeviceCapacity(device: number, bytes: number): void {
    const result = this.#setDeviceCapacity(device, bytes);
    if (result !== 0) throw new Error(`standinSetDeviceCapacity failed with CUresult ${result}`);
  }
}
