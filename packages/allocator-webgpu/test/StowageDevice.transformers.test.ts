import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { expect } from 'chai';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, stowageDevice, stowageDeviceCounts } from '@stowage/allocator-webgpu';
import type { OrtWebModule } from '@stowage/lab/onnx';
import { installOrtForTransformersJs, ortDevice } from '@stowage/lab/onnx';
import { classifierImagePixels, writeClassifierForTransformersJs } from './paddleOcr.js';
import { useOrtOnDawn } from './ortOnDawn.js';

type Transformers = typeof import('@huggingface/transformers');

const MODEL_ID = 'paddle-ocr-direction';

// Issue 36: transformers.js (@huggingface/transformers 4) runs a pipeline unchanged on the Stowage device in Node,
// through onnxruntime-web's native WebGPU EP (Note [transformers.js on onnxruntime-web in Node], in the lab), its
// model from local files only (Note [The classifier in transformers.js's layout], paddleOcr.ts).
describe('stowageDevice under transformers.js', function () {
  this.timeout(600_000);
  const suite = useOrtOnDawn();
  let context: WebGpuContext;
  let transformers: Transformers;
  let modelRoot: string;
  before(async () => {
    const { ort, restore } = suite();
    context = suite().context;
    restore.push(installOrtForTransformersJs(ort as unknown as OrtWebModule, dirname(createRequire(import.meta.url).resolve('onnxruntime-web'))));
    modelRoot = mkdtempSync(join(tmpdir(), 'stowage-transformers-'));
    restore.push(() => rmSync(modelRoot, { recursive: true, force: true }));
    writeClassifierForTransformersJs(modelRoot, MODEL_ID);
    transformers = await import('@huggingface/transformers');
    transformers.env.allowRemoteModels = false;
    transformers.env.localModelPath = `${modelRoot}/`;
  });

  /** The image-classification pipeline on `device`: both labels with their scores for the fixed image. */
  async function classifyOn(device: GPUDevice): Promise<unknown> {
    const { pipeline, RawImage } = transformers;
    const classify = await pipeline('image-classification', MODEL_ID, {
      device: 'auto',
      dtype: 'fp32',
      session_options: { executionProviders: [{ name: 'webgpu', device } as never] },
    });
    try {
      return await classify(new RawImage(classifierImagePixels(), 192, 48, 3), { top_k: 2 });
    } finally {
      await classify.dispose();
    }
  }

  it('runs an image-classification pipeline from local files bit-identical to a plain device', async () => {
    const gpu = context.keepAlive as GPU;
    const plain = await ortDevice(gpu);
    const expected = await classifyOn(plain.device);
    plain.device.destroy();

    const own = await ortDevice(gpu);
    using allocator = createWebGpuAllocator({ device: own.device, keepAlive: gpu, adapterInfo: 'transformers.js test device', owned: false }, { limit: '256MiB' });
    const device = stowageDevice(allocator);
    const actual = await classifyOn(device);

    console.log(`    pipeline output: ${JSON.stringify(actual)}; Stowage device: ${JSON.stringify(stowageDeviceCounts(device))}`);
    expect(actual).to.deep.equal(expected);
    expect(actual).to.have.length(2);
    expect(stowageDeviceCounts(device)!.subAllocated, 'the pipeline ran on the Stowage device').to.be.greaterThan(0);
    own.device.destroy();
  });
});
