import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type { SuiteResult } from './SuiteResult.js';

/** The package's root (the child runs there, so that it resolves `jasmine` and `webgpu`). */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BUNDLE = fileURLToPath(new URL('./tfjs-suite.bundle.cjs', import.meta.url));

let bundled: Promise<string> | undefined;

/**
 * Bundles suiteMain.js (tsc's output) with tfjs-core's ES module files, tfjs-backend-webgpu's and Stowage's into
 * one CommonJS file: Node cannot load tfjs-core's ES module files as they are (imports without extensions,
 * `require` inside), and the suite, the kernels and the backend must share one copy of tfjs-core. Dawn (`webgpu`, a
 * native addon) and `jasmine` stay outside. Once per process.
 */
export function buildSuiteBundle(): Promise<string> {
  bundled ??= build({
    entryPoints: [fileURLToPath(new URL('./suiteMain.js', import.meta.url))],
    outfile: BUNDLE,
    bundle: true,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    mainFields: ['module', 'main'],
    external: ['webgpu', 'jasmine'],
    // tfjs-core's package.json lists the files with side effects and its *_test.js files are not among them:
    // esbuild would drop tests.js's bare imports of them.
    ignoreAnnotations: true,
    logLevel: 'error',
  }).then(() => BUNDLE);
  return bundled;
}

export interface SuiteRunOptions {
  /** Names of tfjs's `describeWithFlags` blocks to run (`'matmul'`, `'AdamOptimizer'`); null for the whole suite. */
  readonly filter: readonly string[] | null;
  /** Kills the child after this many milliseconds. Default: none. */
  readonly timeoutMs?: number;
  /** Where the child's output goes. Default: discarded. */
  readonly log?: (chunk: string) => void;
}

/** Runs tfjs-core's suite on one backend in a child process and returns what passed and failed. */
export async function runTfjsSuite(backend: 'stock' | 'stowage', options: SuiteRunOptions): Promise<SuiteResult> {
  const bundle = await buildSuiteBundle();
  const dir = mkdtempSync(join(tmpdir(), 'tfjs-suite-'));
  const outfile = join(dir, 'result.json');
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(process.execPath, [bundle, backend, JSON.stringify(options.filter), outfile], {
        cwd: PACKAGE_ROOT,
        env: { ...process.env, XDG_RUNTIME_DIR: process.env['XDG_RUNTIME_DIR'] ?? dir },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => options.log?.(chunk));
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => options.log?.(chunk));
      child.on('error', reject);
      child.on('exit', (exitCode) => {
        clearTimeout(timer);
        resolve(exitCode);
      });
    });
    if (code !== 0) throw new Error(`the ${backend} suite run exited with ${code}`);
    return JSON.parse(readFileSync(outfile, 'utf8')) as SuiteResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Where two runs disagree: specs that passed on one backend and failed (or did not run) on the other. */
export interface SuiteDifference {
  readonly onlyStockPassed: string[];
  readonly onlyStowagePassed: string[];
}

export function compareSuites(stock: SuiteResult, stowage: SuiteResult): SuiteDifference {
  const stockPassed = new Set(stock.passed);
  const stowagePassed = new Set(stowage.passed);
  return {
    onlyStockPassed: stock.passed.filter((name) => !stowagePassed.has(name)),
    onlyStowagePassed: stowage.passed.filter((name) => !stockPassed.has(name)),
  };
}
