import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { BrowserBundle } from '@stowage/lab/browser';
import { buildBrowserBundle, CHROMIUM_PATH, hasChromium, runInChromium } from '@stowage/lab/browser';
import type { BrowserCheckReport } from '../../browser/BrowserCheckReport.js';

/** The package root: test/browser/ and its compiled form dist-test/browser/ both sit two levels below it. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('@stowage/allocator-webgpu in the browser', function () {
  this.timeout(60_000);
  let bundle: BrowserBundle;
  before(async () => {
    bundle = await buildBrowserBundle({
      entryPoint: join(PACKAGE_ROOT, 'browser', 'entry.ts'),
      outfile: join(PACKAGE_ROOT, 'dist-browser', 'stowage-webgpu-checks.js'),
    });
  });

  it('bundles with core and its conformance suite for the browser, reaching Node-only modules only through import()', () => {
    expect(bundle.bytes, 'bundle size').to.be.greaterThan(0);
    const staticImports = bundle.externalImports.filter((i) => i.kind !== 'dynamic-import');
    expect(staticImports, 'external modules imported statically (they would not load in a browser)').to.deep.equal([]);
    expect(bundle.warnings, 'esbuild warnings').to.deep.equal([]);
  });

  describe('in headless Chromium through navigator.gpu', () => {
    let report: BrowserCheckReport;
    /** Page errors and console errors, to explain a failure. */
    let pageErrors: readonly string[] = [];

    before(async function () {
      if (!hasChromium()) {
        console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
        this.skip();
      }
      ({ report, pageErrors } = await runInChromium<BrowserCheckReport>(bundle.outfile, 'runStowageBrowserChecks', {
        title: 'Stowage WebGPU browser checks',
        timeoutMs: 45_000,
      }));
      if (report.unavailable !== undefined) {
        console.log(`    skipped: no WebGPU adapter in Chromium — ${report.unavailable}`);
        this.skip();
      }
      const adapter = report.adapter;
      console.log(
        `    Chromium WebGPU adapter: ${adapter?.vendor} ${adapter?.architecture} (fallback: ${String(adapter?.isFallbackAdapter)}); checks took ${report.elapsedMs} ms`,
      );
    });

    it('passes every check of the allocator contract', () => {
      expect(report.contract, 'contract checks run').to.have.length.greaterThan(0);
      const failures = report.contract.filter((check) => !check.ok).map((check) => `${check.name}: ${check.error}`);
      expect(failures, `failed contract checks (page errors: ${pageErrors.join('; ') || 'none'})`).to.deep.equal([]);
    });

    it('reads back through a runtime what it wrote, whole and 3 bytes at an unaligned offset', () => {
      const roundTrip = report.roundTrip;
      expect(roundTrip?.error, `round trip error after: ${roundTrip?.steps.join('; ')}`).to.equal(undefined);
      expect(roundTrip?.steps).to.have.length(3);
      expect(roundTrip?.ok, roundTrip?.steps.join('; ')).to.equal(true);
    });
  });
});
