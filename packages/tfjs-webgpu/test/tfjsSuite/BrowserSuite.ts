import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { runInChromium } from '@stowage/allocator-webgpu/testing';
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
    // Generated code: `eslint .` must not lint it (Note [Linting the bundle] in @stowage/allocator-webgpu/testing).
    banner: { js: '/* eslint-disable */' },
    logLevel: 'error',
  }).then(() => BUNDLE);
  return bundled;
}

/** The page's answer when it has no WebGPU adapter. */
export interface BrowserSuiteUnavailable {
  readonly unavailable: string;
}

/**
 * Runs tfjs-core's suite on one backend in headless Chromium (Debian's, on its SwiftShader WebGPU adapter): a fresh
 * browser and page per run. Resolves to what passed and failed, or to why the page has no adapter.
 */
export async function runTfjsSuiteInChromium(backend: 'stock' | 'stowage', options: SuiteRunOptions): Promise<SuiteResult | BrowserSuiteUnavailable> {
  const bundle = await buildBrowserSuiteBundle();
  const { report, pageErrors } = await runInChromium<SuiteResult | BrowserSuiteUnavailable>(bundle, 'runTfjsSuite', {
    title: `tfjs-core suite on ${backend}`,
    timeoutMs: options.timeoutMs ?? 1_800_000,
    args: [backend, options.filter],
  });
  options.log?.(pageErrors.join('\n'));
  return report;
}
