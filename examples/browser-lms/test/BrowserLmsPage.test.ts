import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { CHROMIUM_PATH, hasChromium, launchChromium } from '@stowage/lab/browser';
import type { BrowserLmsReport } from '@stowage/example-browser-lms';
import { buildPage, EXAMPLE_ROOT, servePage } from '@stowage/example-browser-lms';

/** Where the test keeps its screenshot (git-ignored). */
const OUTPUT = join(EXAMPLE_ROOT, 'output');
const MIB = 1024 * 1024;

describe('examples/browser-lms', function () {
  this.timeout(180_000);

  it('bundles the page for the browser, with no static import of a Node-only module', async () => {
    const bundle = await buildPage();
    expect(bundle.externalImports.filter((i) => i.kind !== 'dynamic-import')).to.deep.equal([]);
  });

  it("runs the selfie model in headless Chromium on Stowage with LMS under a budget below stock's device peak, with stock tfjs-webgpu's bits, the device within the budget and max(1 MiB, 2 %) more, and keeps a screenshot", async function () {
    if (!hasChromium()) {
      console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
      this.skip();
    }
    await buildPage();
    const server = await servePage();
    let browser: Browser | undefined;
    try {
      browser = await launchChromium();
      const page = await browser.newPage({ viewport: { width: 1500, height: 860 } });
      const pageErrors: string[] = [];
      page.on('pageerror', (error) => pageErrors.push(`pageerror: ${error.message}`));
      page.on('console', (message) => {
        if (message.type() === 'error') pageErrors.push(`console.error: ${message.text()}`);
      });
      await page.goto(server.url);
      await page.waitForSelector('body[data-state="done"]', { timeout: 170_000 });
      const report = (await page.evaluate(() => (globalThis as unknown as { browserLms: unknown }).browserLms)) as BrowserLmsReport;
      if (report.unavailable !== undefined) {
        console.log(`    skipped: no WebGPU adapter in Chromium — ${report.unavailable}`);
        this.skip();
      }
      await mkdir(OUTPUT, { recursive: true });
      await page.screenshot({ path: join(OUTPUT, 'browser-lms.png') });
      const { stock, stowage } = report;
      const stats = stowage.stats;
      console.log(
        `    ${report.adapter}: stock peak ${stock.devicePeakBytes}, budget ${stowage.budgetBytes} (${stowage.budgetOfStockPeak}), ` +
          `device peak ${stowage.devicePeakBytes} (${(stowage.devicePeakBytes / stowage.budgetBytes).toFixed(3)}× the budget), ` +
          `staging peak ${stats['staging_bytes.peak']}, reserved peak ${stats['reserved_bytes.all.peak']}, ` +
          `page-outs ${stats['page_out']} (${stats['page_out_bytes']} B), page-ins ${stats['page_in']}, ` +
          `createBuffer ${stock.createBufferCalls} → ${stowage.createBufferCalls}, ${report.elapsedMs} ms; screenshot in ${OUTPUT}`,
      );
      const seen = `${report.error ?? ''} page errors: ${pageErrors.join('; ') || 'none'}`;
      expect(report.error, seen).to.equal(undefined);
      expect(report.sameBitsPerPrediction, seen).to.deep.equal(Array.from({ length: report.predictions }, () => true));
      expect(report.maskMean, 'the mask is not empty').to.be.greaterThan(0);
      expect(stowage.budgetBytes, "a budget below stock's device peak").to.be.below(stock.devicePeakBytes);
      expect(stowage.allowedBytes).to.equal(stowage.budgetBytes + Math.max(MIB, Math.floor(0.02 * stowage.budgetBytes)));
      expect(stowage.devicePeakBytes, 'every GPUBuffer on the device at once').to.be.at.most(stowage.allowedBytes);
      expect(stats['reserved_bytes.all.peak']).to.be.at.most(stowage.budgetBytes);
      expect(stowage.samples, 'the memory chart drew the run').to.be.greaterThan(10);
      expect(await page.locator('#memory-page').getAttribute('srcdoc'), 'the memory page of the run').to.contain('Stowage memory');
    } finally {
      await browser?.close();
      await server.close();
    }
  });
});
