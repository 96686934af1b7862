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

  it('runs silero VAD v5 (3 steps) bit-identical to a plain device', async function () {
    const plain = (await inPage(this, page, 'jsep-plain')).runs[0]!;
    const stowage = (await inPage(this, page, 'jsep-stowage')).runs[0]!;
    expect(stowage.output).to.equal(plain.output);
    expect(stowage.counts?.['subAllocated'], 'JSEP ran on the Stowage device').to.be.greaterThan(0);
  });
});
