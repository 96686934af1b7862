import { expect } from 'chai';
import type { OnnxPage } from './onnxPage.js';
import { inPage, onnxPageOrSkip, pairOf } from './onnxPage.js';

// Issue 36 in headless Chromium: transformers.js's image-classification pipeline, unchanged, on the Stowage device
// against a plain one, its model and wasm files from this machine only (browser/onnxEntry.ts, path 'transformers';
// the README's "transformers.js on a Stowage device" shows the same page code).
describe('stowageDevice under transformers.js in headless Chromium', function () {
  this.timeout(900_000);
  let page: OnnxPage;
  before(async function () {
    page = await onnxPageOrSkip(this);
  });
  after(() => page?.dispose());

  it('runs an image-classification pipeline from local files bit-identical to a plain device', async function () {
    const report = await inPage(this, page, 'transformers');
    const [plain, stowage] = pairOf(report.runs, 'transformers.js image-classification');
    expect(stowage.output).to.equal(plain.output);
    expect(JSON.parse(stowage.output)).to.have.length(2);
    expect(stowage.counts?.['subAllocated'], 'the pipeline ran on the Stowage device').to.be.greaterThan(0);
  });
});
