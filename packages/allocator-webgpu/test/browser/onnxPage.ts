// What the browser tests of onnxruntime-web and transformers.js share: the bundle of browser/onnxEntry.ts, the
// files its page loads (onnxruntime-web's wasm files and the models, all from this machine), and a run of one of
// its paths in a page of its own.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { buildBrowserBundle, CHROMIUM_PATH, hasChromium, runInChromium } from '@stowage/lab/browser';
import type { OnnxCheckPath, OnnxCheckReport, OnnxRun } from '../../browser/OnnxCheckReport.js';
import { PADDLE_CLASSIFIER, paddleOcrModel, writeClassifierForTransformersJs } from '../paddleOcr.js';

/** The package root: test/browser/ and its compiled form dist-test/browser/ both sit two levels below it. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const require = createRequire(join(PACKAGE_ROOT, 'package.json'));

/** Every .wasm and .mjs of an onnxruntime-web dist/ directory, served under `prefix`. */
function wasmFiles(distDir: string, prefix: string): Record<string, string> {
  const names = readdirSync(distDir).filter((name) => name.endsWith('.wasm') || name.endsWith('.mjs'));
  return Object.fromEntries(names.map((name) => [`${prefix}${name}`, join(distDir, name)]));
}

/** The bundled page and the files it loads; `dispose` removes the model files written for it. */
export interface OnnxPage {
  readonly bundlePath: string;
  readonly files: Readonly<Record<string, string>>;
  dispose(): void;
}

/**
 * Builds the page (or skips the test, saying why, without Chromium): the bundle, the transformers.js layout of the
 * PaddleOCR classifier in a directory of its own, and the URL paths browser/onnxEntry.ts loads.
 */
export async function onnxPageOrSkip(context: Mocha.Context): Promise<OnnxPage> {
  if (!hasChromium()) {
    console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
    context.skip();
  }
  const bundle = await buildBrowserBundle({
    entryPoint: join(PACKAGE_ROOT, 'browser', 'onnxEntry.ts'),
    outfile: join(PACKAGE_ROOT, 'dist-browser', 'stowage-onnx-checks.js'),
  });
  const modelRoot = mkdtempSync(join(tmpdir(), 'stowage-onnx-browser-'));
  writeClassifierForTransformersJs(modelRoot, 'paddle-ocr-direction');
  const transformersOrt = dirname(createRequire(require.resolve('@huggingface/transformers')).resolve('onnxruntime-web'));
  const layout = join(modelRoot, 'paddle-ocr-direction');
  const files = {
    ...wasmFiles(dirname(require.resolve('onnxruntime-web')), '/ort/'),
    ...wasmFiles(transformersOrt, '/ort-transformers/'),
    '/models/silero_vad_v5.onnx': join(dirname(require.resolve('@ricky0123/vad-web')), 'silero_vad_v5.onnx'),
    '/models/paddle-classifier.onnx': paddleOcrModel(PADDLE_CLASSIFIER),
    '/models/paddle-ocr-direction/config.json': join(layout, 'config.json'),
    '/models/paddle-ocr-direction/preprocessor_config.json': join(layout, 'preprocessor_config.json'),
    '/models/paddle-ocr-direction/onnx/model.onnx': join(layout, 'onnx', 'model.onnx'),
  };
  return { bundlePath: bundle.outfile, files, dispose: () => rmSync(modelRoot, { recursive: true, force: true }) };
}

/**
 * Runs `path` of the page in a browser of its own; skips the test, saying why, when the page has no fitting
 * adapter; fails naming each run that threw, with the page's errors.
 */
export async function inPage(context: Mocha.Context, page: OnnxPage, path: OnnxCheckPath): Promise<OnnxCheckReport> {
  const { report, pageErrors } = await runInChromium<OnnxCheckReport>(page.bundlePath, 'runStowageOnnxChecks', {
    title: `Stowage ONNX checks: ${path}`,
    timeoutMs: 800_000,
    args: [path],
    files: page.files,
  });
  if (report.unavailable !== undefined) {
    console.log(`    skipped: no fitting WebGPU adapter in Chromium — ${report.unavailable}`);
    context.skip();
  }
  const errors = report.runs.filter((r) => r.error !== undefined).map((r) => `${r.model} ${r.device}: ${r.error}`);
  expect(errors, `page errors: ${pageErrors.join('; ') || 'none'}`).to.deep.equal([]);
  console.log(`    ${path}: ${report.runs.map((r) => `${r.model} ${r.device} ${r.elapsedMs} ms${r.counts ? ` ${JSON.stringify(r.counts)}` : ''}`).join('; ')}`);
  return report;
}

/** The two runs of one model (plain, then Stowage) of a report. */
export function pairOf(runs: readonly OnnxRun[], model: string): [OnnxRun, OnnxRun] {
  const plain = runs.find((r) => r.model === model && r.device === 'plain');
  const stowage = runs.find((r) => r.model === model && r.device === 'stowage');
  expect(plain, `${model} ran on the plain device`).to.not.equal(undefined);
  expect(stowage, `${model} ran on the Stowage device`).to.not.equal(undefined);
  return [plain!, stowage!];
}
