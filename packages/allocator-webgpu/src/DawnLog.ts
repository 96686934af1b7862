// Note [Dawn's log while opening an adapter]
// Dawn writes the adapters it rejects to the process's stderr from C++ (file descriptor 2), not through WebGPU's
// error scopes or a callback the `webgpu` package forwards: on a machine without libvulkan1 every program that opens
// a device printed "Warning: Couldn't load Vulkan: libvulkan.so.1: cannot open shared object file", each followed by
// "at <function> (/home/runner/work/node-webgpu/…/third_party/dawn/src/…:106)", a path on the machine that built
// Dawn; on one with lavapipe, "Vulkan shaderUniform*ArrayDynamicIndexing required"; on Mesa's OpenGL ES,
// "maxDynamicUniformBuffersPerPipelineLayout artificially reduced". None is an error of the program: they say why
// a backend gave no adapter, or how Dawn fitted one.
// So while `openWebGpuDevice` tries a backend, file descriptor 2 points at an unlinked temporary file (dup/dup2
// through koffi, whose binary ships in its npm package). Afterwards the text is split into Dawn's messages (a line
// "Warning: …", its " - While …" context lines, and its "    at f (path)" lines, which are dropped) and everything
// else. Dawn's warnings go into the reason the backend gave no adapter, which the BackendUnavailableError lists when
// no backend gives one, and are not printed; every other line (an "Error: …" of Dawn's, a driver's own output) is
// written back to stderr as it came. STOWAGE_DAWN_LOG=1 leaves stderr alone (Dawn's output as Dawn prints it).
// Where koffi or libc cannot be loaded (not glibc Linux), nothing is captured. A process that dies inside the
// window (a crash in a driver) loses what was captured: STOWAGE_DAWN_LOG=1 is the way to see it. Node's modules and
// koffi are loaded when a capture starts, never imported statically: this file is part of browser bundles, which
// must not import them (koffi through `createRequire`, so that a bundler does not try to bundle it).
// The capture covers JavaScript's own writes to stderr in the same window (Node writes them synchronously to files
// and pipes); they are not Dawn's, so they are written back too, after the window.

/** What a capture gave: Dawn's warnings, without their source paths (the rest was written back to stderr). */
export interface DawnLog {
  readonly warnings: readonly string[];
}

interface Redirect {
  restore(): string;
}

/**
 * Runs `run` with file descriptor 2 captured (Note [Dawn's log while opening an adapter]); returns its result and
 * Dawn's warnings. Other captured output is written back to stderr. `run` should not wait on anything but Dawn.
 */
export async function withDawnLogCaptured<T>(run: () => Promise<T>): Promise<{ readonly value: T; readonly log: DawnLog }> {
  const redirect = process.env['STOWAGE_DAWN_LOG'] === '1' ? null : await redirectStderr();
  const finish = (): DawnLog => splitDawnLog(redirect?.restore() ?? '', (rest) => process.stderr.write(rest));
  let value: T;
  try {
    value = await run();
  } catch (error) {
    finish();
    throw error;
  }
  return { value, log: finish() };
}

/**
 * Splits captured stderr into Dawn's warnings, each one line of text (the message and its " - While …" context,
 * without the "at f (path)" lines), and the rest, given to `passOn` as it was.
 */
export function splitDawnLog(text: string, passOn: (rest: string) => void): DawnLog {
  const warnings: string[] = [];
  const rest: string[] = [];
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const warning = /^Warning: (.*)$/.exec(line);
    if (warning === null) {
      rest.push(line);
      continue;
    }
    const parts = [warning[1]!.trim()];
    while (i + 1 < lines.length && /^(\s+- |\s+at |\s*$)/.test(lines[i + 1]!)) {
      const context = /^\s+- (.*)$/.exec(lines[++i]!);
      if (context !== null) parts.push(context[1]!.trim());
    }
    warnings.push(parts.join(' — '));
  }
  if (rest.length > 0) passOn(rest.join('\n') + '\n');
  return { warnings };
}

/** Points file descriptor 2 at an unlinked temporary file; null where koffi or libc is not there. */
async function redirectStderr(): Promise<Redirect | null> {
  if (process.platform !== 'linux') return null;
  const [{ closeSync, fstatSync, openSync, readSync, unlinkSync }, { tmpdir }, { join }, { createRequire }] = await Promise.all([
    import('node:fs'),
    import('node:os'),
    import('node:path'),
    import('node:module'),
  ]);
  let dup: (fd: number) => number;
  let dup2: (fd: number, to: number) => number;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as typeof import('koffi');
    const lib = koffi.load('libc.so.6');
    dup = lib.func('int dup(int fd)') as (fd: number) => number;
    dup2 = lib.func('int dup2(int fd, int to)') as (fd: number, to: number) => number;
  } catch {
    return null;
  }
  const path = join(tmpdir(), `stowage-dawn-log-${process.pid}-${Math.random().toString(36).slice(2)}`);
  let file: number;
  try {
    file = openSync(path, 'w+', 0o600);
    unlinkSync(path);
  } catch {
    return null;
  }
  const saved = dup(2);
  if (saved < 0 || dup2(file, 2) < 0) {
    if (saved >= 0) closeSync(saved);
    closeSync(file);
    return null;
  }
  let restored = false;
  return {
    restore(): string {
      if (restored) return '';
      restored = true;
      dup2(saved, 2);
      closeSync(saved);
      const bytes = Buffer.alloc(fstatSync(file).size);
      readSync(file, bytes, 0, bytes.length, 0);
      closeSync(file);
      return bytes.toString('utf8');
    },
  };
}
