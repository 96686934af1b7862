import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { createRuntime } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { stowageDevice, stowageDeviceCounts, webgpu } from '@stowage/allocator-webgpu';
import type { RealModelRun } from '@stowage/lab/tfjs';
import { onBackend, predictRealModel, realModel } from '@stowage/lab/tfjs';
import { loadRealModel } from '@stowage/lab/tfjs/node';
import { useTfjsGpuSuite } from './gpuSuite.js';

// tfjs on the Stowage device (README, "tfjs on the Stowage device"): tfjs's own WebGPUBackend, unchanged, on
// `stowageDevice(rt)`, the GPUDevice proxy of issue 36. The comparison with the subclass is measured in
// tools/lab/bench/tfjs-webgpu/proxyDevice.bench.ts.
describe('tfjs on the Stowage device (stock WebGPUBackend on stowageDevice)', function () {
  this.timeout(600_000);
  const gpu = useTfjsGpuSuite();
  let context: WebGpuContext;
  before(() => (context = gpu()));

  it("runs the selfie segmentation graph model to stock tfjs's bits, its intermediate tensors in ranges of Stowage segments", async () => {
    const model = realModel('selfie');
    const predict = async (): Promise<RealModelRun> => {
      const graph = await loadRealModel(model);
      try {
        return await predictRealModel(model, graph);
      } finally {
        graph.dispose();
      }
    };
    const stock = await onBackend(context, 'stock', predict);

    const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '1GiB' })] });
    const device = stowageDevice(runtime, 'webgpu:0');
    try {
      if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
      tf.registerBackend('webgpu', () => new WebGPUBackend(device));
      expect(await tf.setBackend('webgpu')).to.equal(true);
      context.device.pushErrorScope('validation');
      const onProxy = await predict();
      const error = await context.device.popErrorScope();
      expect(error?.message ?? null, 'no command was invalid').to.equal(null);
      expect(onProxy.shapes).to.deep.equal(stock.shapes);
      expect(Buffer.from(onProxy.outputBytes).equals(Buffer.from(stock.outputBytes)), 'mask bits').to.equal(true);
      const mask = new Float32Array(onProxy.outputBytes.buffer);
      expect(mask.every((p) => p >= 0 && p <= 1) && new Set(mask).size > 1, 'a sigmoid mask, not zeros').to.equal(true);
      const counts = stowageDeviceCounts(device)!;
      expect(counts.subAllocated, 'tensors tfjs made on the device became ranges').to.be.greaterThan(0);
      // tfjs uploads weights and inputs into buffers mapped at creation, which the device hands to the real one.
      expect(counts.subAllocated, 'not every buffer').to.be.lessThan(counts.createBuffer);
    } finally {
      if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
      await runtime.dispose();
    }
  });
});
