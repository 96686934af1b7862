import { expect } from 'chai';
import type { Runtime } from '@stowage/core';
import { cpu, createRuntime, InvalidArgumentError, TensorImpl } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { webgpu, WebGpuAllocator } from '@stowage/allocator-webgpu';
import type { Ops, PinScope } from '@stowage/example-train';
import { createCpuOps, mulberry32, train, uniformArray } from '@stowage/example-train';
// Not in the package's exports: the compiled module (built before this test by the project reference).
import { createWebGpuOps } from '../dist/webgpu/webGpuOps.js';
import { OP_CASES as CASES, runCase } from './opCases.js';
import { deviceOrSkip } from './testSupport.js';

// Dawn runs on SwiftShader where there is no GPU: shapes stay small, but span several workgroups (64 invocations)
// and end in a partial one.


/** A runtime of the test's own with the CPU and WebGPU ops over it; `pin` and `afterOp` go to the WebGPU ops. */
async function opsOn(context: WebGpuContext, options: { pin?: PinScope; afterOp?: () => void } = {}): Promise<{ runtime: Runtime; gpu: Ops; cpu: Ops }> {
  const runtime = await createRuntime({ plugins: [cpu(), webgpu({ device: context.device, limit: '64MiB' })] });
  return { runtime, gpu: createWebGpuOps(runtime, { gpu: context.device, ...options }), cpu: createCpuOps(runtime) };
}

/** Runs `body` and fails if the device reported a validation error meanwhile (they are not thrown). */
async function withoutValidationErrors<T>(device: GPUDevice, body: () => Promise<T>): Promise<T> {
  device.pushErrorScope('validation');
  let result: T;
  try {
    result = await body();
  } finally {
    const error = await device.popErrorScope();
    expect(error?.message ?? null, 'a WebGPU validation error').to.equal(null);
  }
  return result;
}

/** float32 agreement: |gpu - cpu| <= 1e-5 + 1e-4 * |cpu| element by element (the CPU sums in float64). */
function expectClose(actual: Float32Array, expected: Float32Array, what: string): void {
  expect(actual.length, `${what}: length`).to.equal(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tolerance = 1e-5 + 1e-4 * Math.abs(expected[i]!);
    if (!(Math.abs(actual[i]! - expected[i]!) <= tolerance)) expect.fail(`${what}[${i}]: ${actual[i]} on WebGPU, ${expected[i]} on the CPU`);
  }
}

function expectSameBits(a: Float32Array, b: Float32Array, what: string): void {
  expect(Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength)), `${what}: the same bits on both runs`).to.equal(true);
}

describe('createWebGpuOps', function () {
  this.timeout(120_000);

  it('refuses a GPUDevice that is not the runtime allocator’s', async function () {
    const context = await deviceOrSkip(this);
    await using runtime = await createRuntime({ plugins: [cpu(), webgpu({ device: context.device, limit: '64MiB' })] });
    expect(runtime.allocator('webgpu')).to.be.instanceOf(WebGpuAllocator);
    const other = { limits: context.device.limits } as unknown as GPUDevice;
    expect(() => createWebGpuOps(runtime, { gpu: other })).to.throw(InvalidArgumentError, /options\.gpu/);
  });
});

for (const op of new Set(CASES.map((c) => c.op))) {
  describe(`WebGpuOps#${op}`, function () {
    this.timeout(120_000);

    for (const c of CASES.filter((c) => c.op === op)) {
      it(`computes ${c.title} as the CPU ops do, and the same bits on a second run`, async function () {
        const context = await deviceOrSkip(this);
        const { runtime, gpu, cpu: host } = await opsOn(context);
        await using _runtime = runtime;
        const random = mulberry32(7);
        const values = c.shapes.map(([rows, cols], i) => (c.prepare ?? ((v) => v))(uniformArray(random, rows * cols, 1), i));
        const expected = await runCase(host, c, values);
        const [first, second] = await withoutValidationErrors(context.device, async () => [await runCase(gpu, c, values), await runCase(gpu, c, values)]);
        expected.forEach((e, i) => {
          expectClose(first![i]!, e, `${c.op} output ${i}`);
          expectSameBits(first![i]!, second![i]!, `${c.op} output ${i}`);
        });
      });
    }
  });
}

describe('WebGpuOps in training', function () {
  this.timeout(120_000);

  // Sizes past one 64-invocation workgroup, small enough for SwiftShader.
  const models = [
    { model: 'mlp', sizes: { batch: 32, inputs: 20, hidden: 70, outputs: 5 } },
    { model: 'transformer', sizes: { sequence: 20, model: 24, hidden: 70, outputs: 8 } },
  ] as const;
  for (const model of models) {
    it(`trains the ${model.model} to the CPU's losses and weights, and to the same bits on a second run`, async function () {
      const context = await deviceOrSkip(this);
      const { runtime, gpu, cpu: host } = await opsOn(context);
      await using _runtime = runtime;
      const expected = await train({ ...model, ops: host, steps: 4 });
      const [first, second] = await withoutValidationErrors(context.device, async () => [
        await train({ ...model, ops: gpu, steps: 4 }),
        await train({ ...model, ops: gpu, steps: 4 }),
      ]);
      expectClose(Float32Array.from(first!.losses), Float32Array.from(expected.losses), 'losses');
      expected.weights.forEach((w, i) => {
        expectClose(first!.weights[i]!, w, `weights ${i}`);
        expectSameBits(first!.weights[i]!, second!.weights[i]!, `weights ${i}`);
      });
      expectSameBits(Float32Array.from(first!.losses), Float32Array.from(second!.losses), 'losses');
    });
  }
});

describe('WebGpuOps operands', function () {
  this.timeout(120_000);

  it('binds one tensor passed twice from a copy, so the device accepts the dispatch', async function () {
    const context = await deviceOrSkip(this);
    const { runtime, gpu, cpu: host } = await opsOn(context);
    await using _runtime = runtime;
    const values = uniformArray(mulberry32(3), 12 * 20, 1);
    const run = async (ops: Ops): Promise<Float32Array[]> => {
      const x = await ops.fromArray(12, 20, values);
      const sum = await ops.add(x, x);
      const gram = await ops.matmul(x, x, true);
      await ops.sgdStep(x, x, 0.25);
      return Promise.all([sum, gram, x].map((t) => ops.toArray(t)));
    };
    const expected = await run(host);
    const actual = await withoutValidationErrors(context.device, () => run(gpu));
    expected.forEach((e, i) => expectClose(actual[i]!, e, `result ${i}`));
  });

  it('reads and writes views that start off a binding boundary', async function () {
    const context = await deviceOrSkip(this);
    const { runtime, gpu } = await opsOn(context);
    await using _runtime = runtime;
    const values = Float32Array.from({ length: 4 * 5 }, (_, i) => i);
    const x = await gpu.fromArray(4, 5, values);
    // Rows 1..2 and 2..3 of x: element offsets 5 and 10 (20 and 40 bytes), overlapping in row 2.
    const upper = x.asStrided([2, 5], [5, 1], 5);
    const lower = x.asStrided([2, 5], [5, 1], 10);
    const sum = await withoutValidationErrors(context.device, () => gpu.add(upper, lower));
    expect([...(await gpu.toArray(sum))]).to.deep.equal([...values.slice(5, 15)].map((v) => v + v + 5));
    await withoutValidationErrors(context.device, () => gpu.sgdStep(upper, lower, 1));
    expect([...(await gpu.toArray(x))]).to.deep.equal([...values.slice(0, 5), ...values.slice(5, 15).map(() => -5), ...values.slice(15)]);
  });

  it('binds empty tensors to scratch bytes: an empty inner dimension gives zeros', async function () {
    const context = await deviceOrSkip(this);
    const { runtime, gpu } = await opsOn(context);
    await using _runtime = runtime;
    const a = await gpu.fromArray(2, 0, new Float32Array(0));
    const b = await gpu.fromArray(0, 3, new Float32Array(0));
    const [product, sums, empty] = await withoutValidationErrors(context.device, async () => [await gpu.matmul(a, b), await gpu.sumRows(b), await gpu.add(a, a)]);
    expect([...(await gpu.toArray(product!))]).to.deep.equal([0, 0, 0, 0, 0, 0]);
    expect([...(await gpu.toArray(sums!))]).to.deep.equal([0, 0, 0]);
    expect(empty!.sizes).to.deep.equal([2, 0]);
  });

  it('refuses a tensor of the CPU and mismatched shapes', async function () {
    const context = await deviceOrSkip(this);
    const { runtime, gpu, cpu: host } = await opsOn(context);
    await using _runtime = runtime;
    const onCpu = await host.fromArray(2, 2, new Float32Array(4));
    const a = await gpu.fromArray(2, 3, new Float32Array(6));
    await expectRejected(gpu.relu(onCpu), /on webgpu/);
    await expectRejected(gpu.matmul(a, a), /inner dimension/);
    await expectRejected(gpu.fromArray(2, 2, new Float32Array(3)), /rows \* cols/);
  });
});

describe('WebGpuOps pinning', function () {
  this.timeout(120_000);

  it('pins the inputs, then the new outputs, and calls afterOp once both guards are disposed', async function () {
    const context = await deviceOrSkip(this);
    const log: string[] = [];
    const names = new Map<object, string>();
    const pin: PinScope = async (...items) => {
      const label = items.map((t) => names.get(t) ?? (t instanceof TensorImpl ? 'new' : '?')).join(',');
      log.push(`pin ${label}`);
      return { [Symbol.dispose]: () => void log.push(`unpin ${label}`) };
    };
    const { runtime, gpu } = await opsOn(context, { pin, afterOp: () => log.push('afterOp') });
    await using _runtime = runtime;
    const a = await gpu.fromArray(2, 3, new Float32Array(6).fill(1));
    const b = await gpu.fromArray(3, 2, new Float32Array(6).fill(2));
    names.set(a, 'a').set(b, 'b');
    log.length = 0;
    const y = await gpu.matmul(a, b);
    expect(log).to.deep.equal(['pin a,b', 'pin new', 'unpin new', 'unpin a,b', 'afterOp']);
    expect([...(await gpu.toArray(y))]).to.deep.equal([6, 6, 6, 6]);
    log.length = 0;
    await gpu.sgdStep(a, a, 0.5);
    expect(log, 'an op without outputs pins nothing more').to.deep.equal(['pin a,a', 'unpin a,a', 'afterOp']);
  });

  it('releases its temporaries once submitted, and its outputs too when afterOp throws', async function () {
    const context = await deviceOrSkip(this);
    let failing = false;
    const { runtime, gpu } = await opsOn(context, {
      afterOp: () => {
        if (failing) throw new Error('probe failed');
      },
    });
    await using _runtime = runtime;
    const live = (): number => runtime.allocator('webgpu').memoryStats()['allocation.all.current'];
    const p = await gpu.fromArray(3, 4, new Float32Array(12).fill(1));
    const t = await gpu.fromArray(3, 4, new Float32Array(12));
    const before = live();
    const { loss, grad } = await gpu.mseLoss(p, t);
    expect(live(), 'the loss and the gradient, not the per-row sums').to.equal(before + 2);
    expect([...(await gpu.toArray(loss))]).to.deep.equal([1]);
    loss.storage.release();
    grad.storage.release();
    failing = true;
    const error = await gpu.mseLoss(p, t).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((error as Error).message).to.equal('probe failed');
    expect(live()).to.equal(before);
  });
});

async function expectRejected(promise: Promise<unknown>, message: RegExp): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).to.be.instanceOf(InvalidArgumentError);
  expect((error as Error).message).to.match(message);
}
