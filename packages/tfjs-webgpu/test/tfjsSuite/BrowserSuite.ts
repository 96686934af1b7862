import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { runInChromium } from '@stowage/lab/browser';
import type { SuiteResult } from './SuiteResult.js';
import type { SuiteRunOptions } from './TfjsSuite.js';

/** The package's root (this file runs as dist-test/tfjsSuite/BrowserSuite.js). */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BUNDLE = join(PACKAGE_ROOT, 'dist-browser', 'tfjs-suite.js');

let bundled: Promise<string> | undefined;

/**
 * Bundles browser/suiteEntry.ts with tfjs-core (its suite included), tfjs-backend-webgpu, Stowage and jasmine-core
 * into one script for the page. jasmine-core is the `jasmine` package's own (the version the Node runs use), found
 * through it; its CommonJS build reads `global`, which the page calls `globalThis`. Once per process.
 */
export function buildBrowserSuiteBundle(): Promise<string> {
  const require = createRequire(join(PACKAGE_ROOT, 'package.json'));
  const jasmineCore = createRequire(require.resolve('jasmine')).resolve('jasmine-core/lib/jasmine-core/jasmine.js');
  bundled ??= build({
    entryPoints: [join(PACKAGE_ROOT, 'browser', 'suiteEntry.ts')],
    outfile: BUNDLE,
    bundle: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2022',
    mainFields: ['browser', 'module', 'main'],
    alias: { 'jasmine-core/lib/jasmine-core/jasmine.js': jasmineCore },
    define: { global: 'globalThis' },
    external: ['webgpu', 'node:*'],
    // As the Node bundle (TfjsSuite.ts): tests.js's bare imports of the *_test.js files must stay.
    ignoreAnnotations: true,
    // Generated code: `eslint .` must not lint it (Note [Linting the bundle] in @stowage/lab/browser).
    banner: { js: '/* eslint-disable */' },
    logLevel: 'error',
  }).then(() => BUNDLE);
  return bundled;
}

/** The page's answer when it has no WebGPU adapter. */
export interface BrowserSuiteUnavailable {
  readonly unavailable: string;
}

/** A whole run in the browser: the suite's result, and the top-level suites during which the device was lost. */
export type BrowserSuiteRun = SuiteResult & { readonly deviceLostIn: string[] };

type PageResult = SuiteResult & { readonly deviceLostIn: string | null };
type SuiteSelection = { readonly names: readonly string[] } | { readonly topSuites: readonly string[] } | null;

// Note [Device loss in the browser suite]: in Chromium (SwiftShader) the page's connection to the GPU can break
// during a run — it did on the stock backend right after broadcastArgs's specs, in every whole-suite run here —
// and from then on every WebGPU call fails ("A valid external Instance reference no longer exists", then
// "createBuffer failed … mappedAtCreation == true" for each upload) while `device.lost` stays pending. One break
// would make the rest of a run (about 1,970 of 4,320 specs for stock) say nothing about either backend. So a run goes
// in pages: the page reports the top-level suite in which it first saw that answer (or `device.lost`); the run
// keeps the suites before it, and goes on in a new page, with a new device, from that suite. A suite that breaks a
// fresh page as its first is kept as it ran (it broke the device itself), and the run goes on after it. The
// breaks are reported (`deviceLostIn`) beside the counts.

/**
 * Runs tfjs-core's suite on one backend in headless Chromium (Debian's, on its SwiftShader WebGPU adapter), in a
 * fresh browser and page, in more pages after a device loss (Note [Device loss in the browser suite]). Resolves to
 * what passed and failed, or to why the page has no adapter.
 */
export async function runTfjsSuiteInChromium(backend: 'stock' | 'stowage', options: SuiteRunOptions): Promise<BrowserSuiteRun | BrowserSuiteUnavailable> {
  const bundle = await buildBrowserSuiteBundle();
  const page = async (fn: string, args: readonly unknown[]): Promise<unknown> => {
    const { report, pageErrors } = await runInChromium<unknown>(bundle, fn, { title: `tfjs-core suite on ${backend}`, timeoutMs: options.timeoutMs ?? 1_800_000, args });
    if (pageErrors.length > 0) options.log?.(pageErrors.join('\n'));
    return report;
  };
  const run = async (selection: SuiteSelection): Promise<PageResult | BrowserSuiteUnavailable> => (await page('runTfjsSuite', [backend, selection])) as PageResult | BrowserSuiteUnavailable;
  const first = await run(options.filter === null ? null : { names: options.filter });
  if ('unavailable' in first) return first;
  if (first.deviceLostIn === null) return { ...first, deviceLostIn: [] };
  // A break: collect the run page by page, by top-level suite (Note [Device loss in the browser suite]).
  const total: BrowserSuiteRun = { ...first, passed: [], failed: [], deviceLostIn: [] };
  const suites = (await page('listTfjsSuites', [])) as string[];
  const keep = (result: PageResult, from: number, through: number): void => {
    const kept = suites.slice(from, through + 1);
    const inKept = (name: string): boolean => kept.some((suite) => name.startsWith(`${suite} `));
    total.passed.push(...result.passed.filter(inKept));
    total.failed.push(...result.failed.filter((f) => inKept(f.name)));
  };
  let result: PageResult = first;
  let from = 0;
  for (;;) {
    let next: number;
    if (result.deviceLostIn === null) {
      keep(result, from, suites.length - 1);
      break;
    }
    total.deviceLostIn.push(result.deviceLostIn);
    const broken = suites.indexOf(result.deviceLostIn);
    if (broken > from) {
      keep(result, from, broken - 1); // the broken suite runs again in a new page
      next = broken;
    } else {
      keep(result, from, broken); // it broke a fresh page: its own result
      next = broken + 1;
    }
    from = next;
    if (from >= suites.length) break;
    const rest = await run(wanted(suites.slice(from), options.filter));
    if ('unavailable' in rest) return rest;
    total.pending += rest.pending;
    total.wallMs += rest.wallMs;
    result = rest;
  }
  return total;
}

/** The top-level suites of `remaining` that the filter (describeWithFlags names, or null for all) selects. */
function wanted(remaining: readonly string[], filter: readonly string[] | null): SuiteSelection {
  return { topSuites: filter === null ? remaining : remaining.filter((suite) => filter.some((name) => suite.startsWith(`${name} webgpu `))) };
}
