import { expect } from 'chai';
import type { OnnxPage } from './onnxPage.js';
import { inPage, onnxPageOrSkip, pairOf } from './onnxPage.js';

// Issue 36 in headless Chromium: onnxruntime-web's native WebGPU EP on the Stowage device against a plain one, every
// wasm and model file served from this machine (browser/onnxEntry.ts, path 'native').
describe('stowageDevice under onnxruntime-web (native WebGPU EP) in headless Chromium', function () {
  this.timeout(900_000);
  let page: OnnxPage;
  before(async function () {
    page = await onnxPageOrSkip(this);
  });
  after(() => page?.dispose());

  it('runs silero VAD v5 (3 steps) and the PaddleOCR classifier bit-identical to a plain device', async function () {
    const report = await inPage(this, page, 'native');
    for (const model of ['silero-v5', 'paddle-classifier']) {
      const [plain, stowage] = pairOf(report.runs, model);
      expect(stowage.output, `${model} bit-identical`).to.equal(plain.output);
      expect(stowage.counts?.['subAllocated'], `${model} ran on the Stowage device`).to.be.greaterThan(0);
    }
  });
});
