import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import type { BrowserCheckReport } from '../../browser/BrowserCheckReport.js';
import type { BrowserChecksBundle } from './buildBrowserChecks.js';
import { buildBrowserChecks } from './buildBrowserChecks.js';
import { CHROMIUM_PATH, hasChromium, launchChromium } from './launchChromium.js';
import type { BrowserChecksServer } from './serveBrowserChecks.js';
import { serveBrowserChecks } from './serveBrowserChecks.js';

/** The page's global that browser/entry.ts defines. */
interface ChecksWindow {
  runStowageBrowserChecks(): Promise<BrowserCheckReport>;
}

describe('@stowage/allocator-webgpu in the browser', function () {
  this.timeout(60_000);
  let bundle: BrowserChecksBundle;
  before(async () => {
    bundle = await buildBrowserChecks();
  });

  it('bundles with core and its conformance suite for the browser, reaching Node-only modules only through import()', () => {
    expect(bundle.bytes, 'bundle size').to.be.greaterThan(0);
    const staticImports = bundle.externalImports.filter((i) => i.kind !== 'dynamic-import');
    expect(staticImports, 'external modules imported statically (they would not load in a browser)').to.deep.equal([]);
    expect(bundle.warnings, 'esbuild warnings').to.deep.equal([]);
  });

  describe('in headless Chromium through navigator.gpu', () => {
    let server: BrowserChecksServer | undefined;
    let browser: Browser | undefined;
    let report: BrowserCheckReport;
    /** Page errors and console errors, to explain a failure. */
    const pageErrors: string[] = [];

    before(async function () {
      if (!hasChromium()) {
        console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
        this.skip();
      }
      server = await serveBrowserChecks(bundle.outfile);
      browser = await launchChromium();
      const page: Page = await browser.newPage();
      page.on('pageerror', (error) => pageErrors.push(`pageerror: ${error.message}`));
      page.on('console', (message) => {
        if (message.type() === 'error') pageErrors.push(`console.error: ${message.text()}`);
      });
      await page.goto(server.url);
      await page.waitForFunction(() => typeof (globalThis as unknown as Partial<ChecksWindow>).runStowageBrowserChecks === 'function', undefined, {
        timeout: 10_000,
      });
      report = await page.evaluate(() => (globalThis as unknown as ChecksWindow).runStowageBrowserChecks());
      if (report.unavailable !== undefined) {
        console.log(`    skipped: no WebGPU adapter in Chromium — ${report.unavailable}`);
        this.skip();
      }
      const adapter = report.adapter;
      console.log(
        `    Chromium WebGPU adapter: ${adapter?.vendor} ${adapter?.architecture} (fallback: ${String(adapter?.isFallbackAdapter)}); checks took ${report.elapsedMs} ms`,
      );
    });

    after(async () => {
      await browser?.close();
      await server?.close();
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
