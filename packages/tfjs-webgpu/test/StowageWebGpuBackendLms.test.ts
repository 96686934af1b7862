import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import type { StorageImpl } from '@stowage/core';
import { createRuntime, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import type { StorageResidency } from '@stowage/lms';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { webgpu } from '@stowage/allocator-webgpu';
import { lms } from '@stowage/lms';
import type { StowageWebGpuBackend } from '@stowage/tfjs-webgpu';
import { registerStowageWebGpuBackend, SynchronousStepPolicy, TensorBytesInFlightError } from '@stowage/tfjs-webgpu';
import type { Model } from '@stowage/lab/tfjs';
import { budgetAt, convNet, inStepWorkingSet, isSameRun, mlp, realFloor, realModel, runReal, runStock, runUnderLms, sameBits, transformerBlock } from '@stowage/lab/tfjs';
import { loadRealModel } from '@stowage/lab/tfjs/node';
import { useTfjsGpuSuite } from './gpuSuite.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const STEPS = 5;

// Note [Budgets of a synchronous step under one budget]: the WebGPU device's budget covers the staging buffers of
// page-outs (Note [One budget] in @stowage/allocator-webgpu), and no page-out made inside a synchronous tfjs step
// lands before the step returns. So every tensor the step made and still holds is on the device at once, in its
// segment or in a staging buffer, and that is the floor of the budget (the paging reserve's size does not move it:
// the mlp's smallest budget is 0.672 of stock's peak with a reserve of 1/8, 1/4 or 1/2 of the budget). Measured
// here (Dawn on SwiftShader; `smallestLmsBudget`, 0.5 % steps), smallest budget as a fraction of stock tfjs's peak
// GPU bytes, before (staging outside the budget) → now: mlp 0.251 → 0.672, conv net 0.486 → 0.647, transformer
// block 0.276 → 0.806; the device then held 3.23×, 1.40× and 3.56× the budget (counted at the device), and now
// holds 1.00× (the transformer 1.01×: a host read over budget). The models' tests run at the smallest, rounded up.

/** The storage of a tensor on the Stowage backend. */
function storageOf(backend: StowageWebGpuBackend, t: tf.Tensor): StorageImpl {
  return (backend as unknown as { tensorMap: { get(id: object): { resource: StorageImpl } } }).tensorMap.get(t.dataId).resource;
}

/** A body for `runUnderLms` that runs `test` and never the model. */
const noModel = (): Model => {
  throw new Error('no model in this test');
};

describe('StowageWebGpuBackend under LMS', function () {
  this.timeout(600_000);
  const gpu = useTfjsGpuSuite(); // small kernels on the GPU too, as in StowageWebGpuBackend.test.ts
  let context: WebGpuContext;
  before(() => (context = gpu()));

  describe('models built in code (predict, then 5 Adam steps)', () => {
    it('runs the mlp at 0.7 of stock tfjs\'s peak GPU bytes, bit-identical to stock, where the runtime without LMS runs out of memory', async () => {
      const stock = await runStock(context, mlp, STEPS);
      // Was a half and a quarter; the smallest budget that runs is now 0.672 (Note [Budgets of a synchronous step
      // under one budget]).
      for (const fraction of [0.7]) {
        const budget = budgetAt(stock.peakGpuBytes, fraction);
        const { run, error, stats } = await runUnderLms(context, mlp, STEPS, budget);
        expect(error, `at ${fraction} of ${stock.peakGpuBytes} bytes`).to.equal(undefined);
        expect(isSameRun(run!, stock.run), 'prediction, losses and weights bits').to.equal(true);
        expect(stats['reserved_bytes.all.peak']).to.be.at.most(budget);
        expect(stats['page_in'], 'tensors came back from host memory').to.be.greaterThan(0);
        expect(stock.peakTensorBytes, "stock's live tensors alone exceed the budget").to.be.greaterThan(budget);
        const withoutLms = await runUnderLms(context, mlp, STEPS, budget, undefined, false);
        expect(withoutLms.error).to.be.instanceOf(OutOfMemoryError);
      }
    });

    it('runs the conv net at 0.67 of stock\'s peak bit-identical to stock; a quarter is below its in-step working set, out of reach for a synchronous step', async () => {
      const stock = await runStock(context, convNet, STEPS);
      // Was a half; the smallest budget that runs is now 0.647 (Note [Budgets of a synchronous step under one budget]).
      const smallest = budgetAt(stock.peakGpuBytes, 0.67);
      const { run, error } = await runUnderLms(context, convNet, STEPS, smallest);
      expect(error).to.equal(undefined);
      expect(isSameRun(run!, stock.run)).to.equal(true);
      const workingSet = await inStepWorkingSet(context, convNet, STEPS);
      expect(workingSet.maxBytes, 'the floor of any budget').to.be.greaterThan(stock.peakGpuBytes / 4);
      const quarter = await runUnderLms(context, convNet, STEPS, budgetAt(stock.peakGpuBytes, 0.25));
      expect(quarter.error, 'a typed error, never wrong values').to.satisfy((e: unknown) => e instanceof TensorBytesInFlightError || e instanceof OutOfMemoryError);
    });

    it('runs the transformer block at 0.83 of stock\'s peak (its smallest measured budget is 0.806), bit-identical to stock', async () => {
      const stock = await runStock(context, transformerBlock, STEPS);
      // Was a half and 0.3 (the smallest, 0.277, before staging counted: Note [Budgets of a synchronous step under one budget]).
      for (const fraction of [0.83]) {
        const budget = budgetAt(stock.peakGpuBytes, fraction);
        const { run, error, stats } = await runUnderLms(context, transformerBlock, STEPS, budget);
        expect(error, `at ${fraction} of ${stock.peakGpuBytes} bytes`).to.equal(undefined);
        expect(isSameRun(run!, stock.run)).to.equal(true);
        expect(stats['page_in']).to.be.greaterThan(0);
      }
    });
  });

  describe('real pretrained models (REAL_MODELS in @stowage/lab/tfjs)', () => {
    it('keeps every buffer at the device within the budget plus max(1 MiB, 2 %) while paging the selfie segmentation model at a quarter of its stock peak, bit-identical to stock', async () => {
      // One prediction each (the weights' upload included): stock peaks at 26 MB, the model's floor is 4.2 MB.
      const model = realModel('selfie');
      const load = () => loadRealModel(model);
      const stock = await runReal(context, model, load, { kind: 'stock' }, 0);
      const budget = budgetAt(stock.peakGpuBytes, 0.25);
      const lms = await runReal(context, model, load, { kind: 'lms', budgetBytes: budget }, 0);
      expect(lms.error).to.equal(undefined);
      expect(sameBits(lms.run!, stock.run!), 'mask bits').to.equal(true);
      expect(lms.stats!['reclaimed'], 'tensors left the device').to.be.greaterThan(0);
      expect(lms.peakGpuBytes, 'every GPUBuffer alive at the device, at its peak').to.be.at.most(budget + Math.max(MiB, 0.02 * budget));
      expect(lms.createBufferCalls, "createBuffer calls against stock's").to.be.at.most(stock.createBufferCalls);
    });
    it('runs the selfie segmentation model at 1.25 x its floor over three predictions, each bit-identical to stock, the device within the budget plus max(1 MiB, 2 %)', async () => {
      // A loop of predictions: the second starts from the first's placement (weights paged back in between
      // activations); Note [The output before the page-ins] keeps a small page-in out of the room a kernel's output needs.
      const model = realModel('selfie');
      const load = () => loadRealModel(model);
      const stock = await runReal(context, model, load, { kind: 'stock' }, 0);
      const floor = await realFloor(context, model, load);
      const budget = Math.round((1.25 * floor.floorBytes) / 512) * 512;
      const lms = await runReal(context, model, load, { kind: 'lms', budgetBytes: budget }, 2);
      expect(lms.error).to.equal(undefined);
      expect(lms.stable, 'every prediction the first one\'s bits').to.equal(true);
      expect(sameBits(lms.run!, stock.run!), 'mask bits').to.equal(true);
      expect(lms.peakGpuBytes).to.be.at.most(budget + Math.max(MiB, 0.02 * budget));
      expect(lms.createBufferCalls).to.be.at.most(stock.createBufferCalls);
    });
  });

  describe('#lmsSettle', () => {
    it('copies a dirty tensor to host memory only where a reclaim is predicted, and an uploaded one never (clean from its upload)', async () => {
      let checked = false;
      const { error } = await runUnderLms(context, noModel, 0, 1024 * KiB, async (backend, runtime) => {
        const stats = (): Readonly<Record<string, number>> => runtime.allocator('webgpu').memoryStats() as Readonly<Record<string, number>>;
        await backend.endLmsStep(); // a step learned: from now on copies follow what is predicted
        const uploaded = tf.tensor(new Float32Array(4096).fill(5)); // 16 KiB of host values
        const written = tf.add(uploaded, 1); // 16 KiB made by a kernel: dirty
        await written.data(); // an async point after a stretch that reclaimed nothing
        expect(stats()['page_out'], 'no reclaim predicted: nothing copied').to.equal(0);
        const residency = (t: tf.Tensor): StorageResidency => storageOf(backend, t).lms as StorageResidency;
        expect(residency(uploaded).hasHostCopy, "the upload's values are its host copy").to.equal(true);
        expect(residency(written).hasHostCopy).to.equal(false);
        await backend.lmsSettle({ hostCopies: 'all' });
        expect(stats()['page_out']).to.equal(1);
        expect(residency(written).hostCopyReady).to.equal(true);
        let refused: unknown;
        try {
          await backend.lmsSettle({ hostCopies: 'every' as 'all' });
        } catch (caught) {
          refused = caught;
        }
        expect(refused).to.be.instanceOf(InvalidArgumentError);
        tf.dispose([uploaded, written]);
        checked = true;
      });
      expect(error).to.equal(undefined);
      expect(checked).to.equal(true);
    });
  });

  describe('#read', () => {
    it('reads a tensor that finds no room for its staging in parts inside the budget (Note [Reads within the budget]), never beyond it', async () => {
      let checked = false;
      // 128 KiB with a quarter kept for page-out staging: two 48 KiB tensors fill the 96 KiB segments may take, so
      // one read's 48 KiB of staging finds 32 KiB; it goes in 24 KiB parts.
      const budget = 128 * KiB;
      const { error } = await runUnderLms(context, noModel, 0, budget, async (backend, runtime) => {
        const stats = (): Readonly<Record<string, number>> => runtime.allocator('webgpu').memoryStats() as Readonly<Record<string, number>>;
        const a = tf.fill([12 * 1024], 1);
        const b = tf.fill([12 * 1024], 2);
        const values = await b.data();
        expect(values.length).to.equal(12 * 1024);
        expect(values.every((v) => v === 2)).to.equal(true);
        expect(storageOf(backend, b).lms!.state, 'unpinned after the read').to.equal('inactive');
        expect(stats()['reads_over_budget']).to.equal(0);
        expect(stats()['device_bytes.peak'], 'segments and staging').to.be.at.most(budget + 16);
        expect(stats()['staging_bytes.peak']).to.be.at.most(32 * KiB);
        tf.dispose([a, b]);
        checked = true;
      });
      expect(error).to.equal(undefined);
      expect(checked).to.equal(true);
    });
  });

  describe('#runWebGPUProgram', () => {
    it("keeps a kernel's inputs and output pinned until the submit that runs it", async () => {
      await runUnderLms(context, noModel, 0, 1024 * KiB, async (backend) => {
        const a = tf.fill([1024], 1);
        const b = tf.fill([1024], 2);
        await Promise.all([a.data(), b.data()]);
        const c = tf.add(a, b); // recorded, not submitted
        const states = (): string[] => [a, b, c].map((t) => storageOf(backend, t).lms!.state);
        expect(states()).to.deep.equal(['active', 'active', 'active']);
        expect([...(await c.data()).slice(0, 2)]).to.deep.equal([3, 3]); // submits
        expect(states()).to.deep.equal(['inactive', 'inactive', 'inactive']);
        tf.dispose([a, b, c]);
      });
    });

    it('brings a tensor paged out between steps back in where a kernel uses it', async () => {
      let checked = false;
      // 82 KiB (was 50): a, the three fills and add's output are 16 KiB each, and the fills, made in this
      // synchronous stretch, stay on the device (segment or staging) until it ends: 80 KiB and the scalar. The
      // smallest that runs is 81 KiB; from 86 KiB four tensors fit beside the paging reserve and a stays resident.
      const { error } = await runUnderLms(context, noModel, 0, 82 * KiB, async (backend, runtime) => {
        const a = tf.fill([4096], 3); // 16 KiB
        await a.data(); // an async point: a gets a complete host copy (nothing is learned yet)
        const others = [1, 2, 4].map((v) => tf.fill([4096], v)); // the last one needs a's room
        expect(storageOf(backend, a).lms!.state).to.equal('reclaimed');
        const e = tf.add(a, 1);
        expect(storageOf(backend, a).lms!.state, 'brought back and pinned').to.equal('active');
        expect([...(await e.data()).slice(0, 2)]).to.deep.equal([4, 4]);
        expect((runtime.allocator('webgpu').memoryStats() as Readonly<Record<string, number>>)['page_in']).to.be.greaterThan(0);
        tf.dispose([a, e, ...others]);
        checked = true;
      });
      expect(error).to.equal(undefined);
      expect(checked).to.equal(true);
    });

    it("allocates a kernel's output before bringing its reclaimed inputs back (a small page-in never splits the room the output needs)", async () => {
      let checked = false;
      const { error } = await runUnderLms(context, noModel, 0, 82 * KiB, async (backend, runtime) => {
        const a = tf.fill([4096], 3); // 16 KiB
        await a.data();
        const others = [1, 2, 4].map((v) => tf.fill([4096], v));
        expect(storageOf(backend, a).lms!.state).to.equal('reclaimed');
        const order: string[] = [];
        const allocated = ({ ptr }: { ptr: { address: number } }): void => void order.push(`allocated ${ptr.address}`);
        const pagedIn = (): void => void order.push('pagedIn');
        const allocator = runtime.allocator('webgpu');
        allocator.events.on('allocated', allocated);
        backend.lmsDevice!.events.on('pagedIn', pagedIn);
        const e = tf.add(a, 1);
        allocator.events.off('allocated', allocated);
        backend.lmsDevice!.events.off('pagedIn', pagedIn);
        expect(order.indexOf('pagedIn'), 'a was brought back').to.be.greaterThan(0);
        expect(order[0], "the first allocation is the output's").to.equal(`allocated ${storageOf(backend, e).peekDataPtr().address}`);
        expect([...(await e.data()).slice(0, 2)]).to.deep.equal([4, 4]);
        tf.dispose([a, e, ...others]);
        checked = true;
      });
      expect(error).to.equal(undefined);
      expect(checked).to.equal(true);
    });

    it("moves a dirty input out of the segment its kernel's output needs when nothing else makes room (Note [Moving dirty inputs out of the output's way])", async () => {
      // 240 KiB, a sixteenth kept for page-out staging, default (shared) segments: a 160 KiB tensor's segment is
      // left with a 32 KiB input in it, written in this synchronous stretch (dirty); the kernel's 160 KiB output
      // needs that segment, and the budget has no room for a second one of that size.
      const runtime = await createRuntime({ plugins: [webgpu({ device: context.device, limit: 240 * KiB, pagingReserve: { fraction: 1 / 16 } }), lms({ policy: new SynchronousStepPolicy(), devices: ['webgpu'] })] });
      try {
        await registerStowageWebGpuBackend(runtime, { gpu: context.keepAlive });
        expect(await tf.setBackend('webgpu')).to.equal(true);
        const big = tf.fill([160 * 256], 1);
        await big.data();
        big.dispose();
        const a = tf.fill([32 * 256], 2);
        const tiled = tf.tile(a, [5]);
        const values = await tiled.data();
        expect(values.length).to.equal(160 * 256);
        expect(values.every((v) => v === 2), "the moved input's bits").to.equal(true);
        expect([...(await a.data()).slice(0, 2)]).to.deep.equal([2, 2]);
        const stats = runtime.allocator('webgpu').memoryStats() as Readonly<Record<string, number>>;
        expect(stats['device_bytes.peak']).to.be.at.most(240 * KiB + 16);
        tf.dispose([a, tiled]);
      } finally {
        tf.removeBackend('webgpu');
        await runtime.dispose();
      }
    });

    it('throws TensorBytesInFlightError, changing nothing, when a kernel needs a tensor paged out earlier in the same synchronous step; runs it after lmsSettle()', async () => {
      let checked = false;
      // 82 KiB (was 50): the four 16 KiB fills of one synchronous stretch stay on the device (x in its staging
      // buffer) until it ends; the smallest that runs is 80 KiB, and from 86 KiB all four fit and x stays resident.
      const { error } = await runUnderLms(context, noModel, 0, 82 * KiB, async (backend) => {
        // One synchronous stretch: x is written, then paged out (dirty) to make room, then needed.
        const [x, ...others] = [1, 2, 3, 4].map((v) => tf.fill([4096], v));
        expect(storageOf(backend, x!).lms!.state).to.equal('reclaimed');
        let thrown: unknown;
        try {
          tf.add(x!, 1);
        } catch (caught) {
          thrown = caught;
        }
        expect(thrown).to.be.instanceOf(TensorBytesInFlightError);
        expect((thrown as TensorBytesInFlightError).code).to.equal('PAGE_IN_PENDING');
        expect((thrown as Error).message).to.match(/endLmsStep/);
        expect(storageOf(backend, x!).lms!.state).to.equal('reclaimed');
        await backend.lmsSettle(); // the bytes land
        const y = tf.add(x!, 1);
        expect([...(await y.data()).slice(0, 2)]).to.deep.equal([2, 2]);
        tf.dispose([x!, y, ...others]);
        checked = true;
      });
      expect(error).to.equal(undefined);
      expect(checked).to.equal(true);
    });
  });
});
