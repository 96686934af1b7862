import { expect } from 'chai';
import { CHROMIUM_PATH, deviceOrSkip, hasChromium } from '@stowage/lab/browser';
import { TFJS_LIMITS } from '@stowage/lab/tfjs';
import { runTfjsSuiteInChromium } from './tfjsSuite/BrowserSuite.js';
import type { SuiteResult } from './tfjsSuite/SuiteResult.js';
import { compareSuites, runTfjsSuite } from './tfjsSuite/TfjsSuite.js';

/**
 * The part of tfjs-core's published suite CI runs (the whole suite, `pnpm test:tfjs-suite`, takes too long on a
 * software device): every kernel the models of StowageWebGpuBackend.test.ts use, their gradients, the Adam
 * optimizer, and the engine's memory and gradient tests. Names of tfjs's describeWithFlags blocks.
 */
export const CI_SUBSET = [
  'matmul',
  'relu',
  'conv2d',
  'maxPool',
  'mean',
  'add',
  'sub',
  'mul',
  'div',
  'sqrt',
  'sum',
  'softmax',
  'moments',
  'transpose',
  'oneHot',
  'fill',
  'softmaxCrossEntropy',
  'AdamOptimizer',
  'gradients',
  'memory',
  'disposeVariables',
  'Detects memory leaks in kernels',
];

describe("tfjs-core's test suite", function () {
  this.timeout(1_800_000);

  it('passes and fails the same specs on the Stowage backend as on tfjs\'s own WebGPU backend (CI subset)', async function () {
    await deviceOrSkip(this, TFJS_LIMITS);
    expectSameSets(await runTfjsSuite('stock', { filter: CI_SUBSET }), await runTfjsSuite('stowage', { filter: CI_SUBSET }));
  });

  it('passes and fails the same specs on both backends in headless Chromium too (CI subset)', async function () {
    if (!hasChromium()) {
      console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
      this.skip();
    }
    const stock = await runTfjsSuiteInChromium('stock', { filter: CI_SUBSET });
    if ('unavailable' in stock) {
      console.log(`    skipped: no WebGPU adapter in Chromium — ${stock.unavailable}`);
      this.skip();
    }
    const stowage = await runTfjsSuiteInChromium('stowage', { filter: CI_SUBSET });
    if ('unavailable' in stowage) throw new Error(`Chromium had an adapter for stock tfjs, then none: ${stowage.unavailable}`);
    expectSameSets(stock, stowage);
  });
});

function expectSameSets(stock: SuiteResult, stowage: SuiteResult): void {
  console.log(`    stock: ${stock.passed.length} passed, ${stock.failed.length} failed; stowage: ${stowage.passed.length} passed, ${stowage.failed.length} failed`);
  expect(stock.passed.length, 'the subset ran (405 of its 406 specs pass on stock here)').to.be.greaterThan(350);
  const difference = compareSuites(stock, stowage);
  const failures = Object.fromEntries(stowage.failed.map((f) => [f.name, f.message]));
  expect(difference.onlyStockPassed.map((name) => `${name}: ${failures[name] ?? 'did not run'}`), 'specs only stock passes').to.deep.equal([]);
  expect(difference.onlyStowagePassed, 'specs only Stowage passes').to.deep.equal([]);
}
