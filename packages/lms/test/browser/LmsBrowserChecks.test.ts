import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { BrowserBundle } from '@stowage/lab/browser';
import { buildBrowserBundle, CHROMIUM_PATH, hasChromium, runInChromium } from '@stowage/lab/browser';
import type { LmsBrowserCheckReport, LmsCheckId } from '../../browser/LmsBrowserCheckReport.js';

/** The package root: test/browser/ and its compiled form dist-test/browser/ both sit two levels below it. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('@stowage/lms in the browser', function () {
  this.timeout(120_000);
  let bundle: BrowserBundle;
  before(async () => {
    bundle = await buildBrowserBundle({
      entryPoint: join(PACKAGE_ROOT, 'browser', 'entry.ts'),
      outfile: join(PACKAGE_ROOT, 'dist-browser', 'stowage-lms-checks.js'),
    });
  });

  it('bundles with core and allocator-webgpu for the browser, reaching Node-only modules only through import()', () => {
    expect(bundle.bytes, 'bundle size').to.be.greaterThan(0);
    const staticImports = bundle.externalImports.filter((i) => i.kind !== 'dynamic-import');
    expect(staticImports, 'external modules imported statically (they would not load in a browser)').to.deep.equal([]);
    expect(bundle.warnings, 'esbuild warnings').to.deep.equal([]);
  });

  describe('in headless Chromium through navigator.gpu, under a WebGPU budget', () => {
    let report: LmsBrowserCheckReport;
    /** Page errors and console errors, to explain a failure. */
    let pageErrors: readonly string[] = [];

    before(async function () {
      if (!hasChromium()) {
        console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
        this.skip();
      }
      ({ report, pageErrors } = await runInChromium<LmsBrowserCheckReport>(bundle.outfile, 'runStowageLmsBrowserChecks', {
        title: 'Stowage LMS browser checks',
        timeoutMs: 100_000,
      }));
      if (report.unavailable !== undefined) {
        console.log(`    skipped: no WebGPU adapter in Chromium — ${report.unavailable}`);
        this.skip();
      }
      console.log(`    Chromium WebGPU adapter: ${report.adapter}; budget ${report.budgetBytes} bytes; checks took ${report.elapsedMs} ms`);
    });

    /** Asserts that the check ran and held, naming what it saw, its error and the page's errors otherwise. */
    function expectCheck(id: LmsCheckId): void {
      const check = report.checks.find((c) => c.id === id);
      expect(check, `check '${id}' in the report`).not.to.equal(undefined);
      const seen = `${check!.details.join('; ')}${check!.error === undefined ? '' : `; error: ${check!.error}`}; page errors: ${pageErrors.join('; ') || 'none'}`;
      expect(check!.ok, seen).to.equal(true);
    }

    it('reclaims storages under the budget and brings each back with every byte through await pinAsync', () => {
      expectCheck('round-trip');
    });

    it('refuses a synchronous pin of a storage whose page-out is in flight with PageInPendingError, leaving it reclaimed', () => {
      expectCheck('pin-pending');
    });

    it('never reserves more than the budget', () => {
      expectCheck('budget');
    });

    it('reports the LMS keys in memoryStats(), with page-outs and page-ins counted', () => {
      expectCheck('statistics');
    });

    it('learns a loop: reclaims find speculative page-outs, prefetched storages are pinned, and every write is kept', () => {
      expectCheck('speculation');
    });
  });
});
