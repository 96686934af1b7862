import { expect } from 'chai';
import type { OnnxPage } from './onnxPage.js';
import { inPage, onnxPageOrSkip } from './onnxPage.js';

// Issue 36 in headless Chromium: onnxruntime-web's JSEP build on the Stowage device against a plain one. JSEP
// starts its device once per page, from its adapter's requestDevice, so each device has a page of its own
// (browser/onnxEntry.ts, paths 'jsep-plain' and 'jsep-stowage').
describe('stowageDevice under onnxruntime-web (JSEP) in headless Chromium', function () {
  this.timeout(900_000);
  let page: OnnxPage;
  before(async function () {
    page = await onnxPageOrSkip(this);
  });
  after(() => page?.dispose());

  it('runs silero VAD v5 (3 steps) and the PaddleOCR classifier bit-identical to a plain device', async function () {
    const plain = (await inPage(this, page, 'jsep-plain')).runs;
    const stowage = (await inPage(this, page, 'jsep-stowage')).runs;
    for (const model of ['silero-v5', 'paddle-classifier']) {
      const [expected, actual] = [plain.find((r) => r.model === model), stowage.find((r) => r.model === model)];
      expect(actual?.output, `${model} bit-identical`).to.equal(expected?.output);
      expect(actual?.output, `${model} gave an output`).to.not.equal('');
    }
    expect(stowage[0]?.counts?.['subAllocated'], 'JSEP ran on the Stowage device').to.be.greaterThan(0);
  });
});
