import { expect } from 'chai';
import type { Runtime } from '@stowage/core';
import { cpu, createRuntime, InvalidArgumentError } from '@stowage/core';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { cuda } from '@stowage/allocator-cuda';
import type { Ops } from '@stowage/example-train';
import { createCpuOps, createCudaHostOps, mulberry32, train, uniformArray } from '@stowage/example-train';
import { OP_CASES, runCase } from './opCases.js';
import { libcudaOrSkip } from './testSupport.js';

// The CUDA ops keep every tensor in device memory and compute on the host with the CPU reference's loops (Note
// [Host compute on CUDA] in cuda/cudaHostOps.ts), so they must give the CPU ops' bits. Without a GPU they run on
// the stand-in libcuda.

/** A runtime of the test's own with CPU and CUDA ops over it. */
async function opsOn(libcuda: string): Promise<{ runtime: Runtime; device: Ops; host: Ops }> {
  const runtime = await createRuntime({ plugins: [cpu(), cuda({ libcuda, allocConf: '', limit: '64MiB' })] });
  return { runtime, device: createCudaHostOps(runtime), host: createCpuOps(runtime) };
}

function bitsOf(values: Float32Array): number[] {
  return [...new Uint32Array(values.buffer, values.byteOffset, values.length)];
}

describe('createCudaHostOps', function () {
  this.timeout(60_000);

  for (const c of OP_CASES) {
    it(`computes ${c.op}, ${c.title}, to the CPU ops' bits`, async function () {
      const { runtime, device, host } = await opsOn(libcudaOrSkip(this));
      await using _runtime = runtime;
      const random = mulberry32(7);
      const values = c.shapes.map(([rows, cols], i) => (c.prepare ?? ((v) => v))(uniformArray(random, rows * cols, 1), i));
      const expected = await runCase(host, c, values);
      const actual = await runCase(device, c, values);
      expected.forEach((e, i) => expect(bitsOf(actual[i]!), `output ${i}`).to.deep.equal(bitsOf(e)));
    });
  }

  it('keeps tensors in device memory: the bytes at the storage’s device pointer are the values', async function () {
    const { runtime, device } = await opsOn(libcudaOrSkip(this));
    await using _runtime = runtime;
    const values = uniformArray(mulberry32(5), 6 * 7, 1);
    const x = await device.fromArray(6, 7, values);
    const y = await device.scale(x, 2);
    const allocator = runtime.allocator('cuda') as CudaAllocator;
    const bytes = new Uint8Array(6 * 7 * 4);
    allocator.backend.driver.memcpyDtoH(bytes, allocator.devicePointer(y.storage.data()));
    expect([...new Float32Array(bytes.buffer)]).to.deep.equal([...values].map((v) => v * 2));
    expect(y.device.type).to.equal('cuda');
  });

  it('reads and writes views that start inside their storage', async function () {
    const { runtime, device } = await opsOn(libcudaOrSkip(this));
    await using _runtime = runtime;
    const values = Float32Array.from({ length: 4 * 5 }, (_, i) => i);
    const x = await device.fromArray(4, 5, values);
    const upper = x.asStrided([2, 5], [5, 1], 5);
    const lower = x.asStrided([2, 5], [5, 1], 10);
    expect([...(await device.toArray(await device.add(upper, lower)))]).to.deep.equal([...values.slice(5, 15)].map((v) => v + v + 5));
    await device.sgdStep(lower, upper, 1);
    expect([...(await device.toArray(x))], 'rows 2 and 3 less rows 1 and 2, the rest unchanged').to.deep.equal([...values.slice(0, 10), 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]);
  });

  it('trains the mlp and the transformer to the CPU ops’ losses and weights, bit for bit', async function () {
    const { runtime, device, host } = await opsOn(libcudaOrSkip(this));
    await using _runtime = runtime;
    for (const model of ['mlp', 'transformer'] as const) {
      const expected = await train({ model, ops: host, steps: 2 });
      const actual = await train({ model, ops: device, steps: 2 });
      expect(actual.losses, `${model} losses`).to.deep.equal(expected.losses);
      expected.weights.forEach((w, i) => expect(bitsOf(actual.weights[i]!), `${model} weights ${i}`).to.deep.equal(bitsOf(w)));
    }
  });

  it('refuses a CPU tensor with InvalidArgumentError', async function () {
    const { runtime, device, host } = await opsOn(libcudaOrSkip(this));
    await using _runtime = runtime;
    const onCpu = await host.fromArray(2, 2, new Float32Array(4));
    const onCuda = await device.fromArray(2, 2, new Float32Array(4));
    await device.add(onCuda, onCpu).then(
      () => expect.fail('expected a rejection'),
      (error: unknown) => expect(error).to.be.instanceOf(InvalidArgumentError),
    );
  });
});
