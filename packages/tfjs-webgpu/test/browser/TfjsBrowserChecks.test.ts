import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { BrowserBundle } from '@stowage/lab/browser';
import { buildBrowserBundle, CHROMIUM_PATH, hasChromium, runInChromium } from '@stowage/lab/browser';
import type { TfjsBrowserReport } from '../../browser/TfjsBrowserReport.js';

/** The package root: test/browser/ and its compiled form dist-test/browser/ both sit two levels below it. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('@stowage/tfjs-webgpu in the browser', function () {
  this.timeout(600_000);
  let bundle: BrowserBundle;
  before(async () => {
    bundle = await buildBrowserBundle({
      entryPoint: join(PACKAGE_ROOT, 'browser', 'entry.ts'),
      outfile: join(PACKAGE_ROOT, 'dist-browser', 'stowage-tfjs-checks.js'),
    });
  });

  it('bundles tfjs, its WebGPU backend and Stowage for the browser, with no static import of a Node-only module', () => {
    const staticImports = bundle.externalImports.filter((i) => i.kind !== 'dynamic-import');
    expect(staticImports).to.deep.equal([]);
  });

  it('runs the models in headless Chromium on navigator.gpu bit-identical to stock tfjs, with no validation error, the mlp under LMS at 0.7 of stock\'s peak, and dataSync of a tensor\'s own range', async function () {
    if (!hasChromium()) {
      console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
      this.skip();
    }
    const { report, pageErrors } = await runInChromium<TfjsBrowserReport>(bundle.outfile, 'runStowageTfjsBrowserChecks', {
      title: 'Stowage tfjs browser checks',
      timeoutMs: 560_000,
    });
    if (report.unavailable !== undefined) {
      console.log(`    skipped: no WebGPU adapter in Chromium — ${report.unavailable}`);
      this.skip();
    }
    console.log(`    Chromium WebGPU adapter: ${report.adapter}; took ${report.elapsedMs} ms`);
    expect(report.models.map((m) => m.name)).to.deep.equal(['mlp', 'conv', 'transformer']);
    for (const model of report.models) {
      const seen = `${model.name}: ${model.error ?? ''} validation: ${model.validationError}; page errors: ${pageErrors.join('; ') || 'none'}`;
      expect(model.error, seen).to.equal(undefined);
      expect(model.validationError, seen).to.equal(null);
      expect([model.samePrediction, model.sameLosses, model.sameWeights], seen).to.deep.equal([true, true, true]);
      expect(model.losses.every((loss) => loss > 0), seen).to.equal(true);
    }
    expect(report.dataSync.error, 'dataSync() of a Stowage tensor').to.equal(undefined);
    expect(report.dataSync.offset, 'a tensor read starts inside its segment, not at its start').to.be.greaterThan(0);
    expect(report.dataSync.sameAsData, 'dataSync() against data()').to.equal(true);
    const lmsRun = report.lms!;
    console.log(`    under LMS: the ${lmsRun.name} at ${lmsRun.budgetBytes} bytes (0.7 of stock's ${lmsRun.stockPeakGpuBytes}), ${lmsRun.pageIns} page-ins`);
    expect(lmsRun.error, lmsRun.error).to.equal(undefined);
    expect(lmsRun.same, 'bit-identical to stock').to.equal(true);
    expect(lmsRun.reservedPeakBytes).to.be.at.most(lmsRun.budgetBytes);
    expect(lmsRun.pageIns).to.be.greaterThan(0);
  });
});
