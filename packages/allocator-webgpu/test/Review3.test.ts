import { expect } from 'chai';
import type { DataPtr, DeviceError as DeviceErrorType } from '@stowage/core';
import { DeviceError, DisposedError, InvalidArgumentError } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, openWebGpuDevice } from '@stowage/allocator-webgpu';
import { allocatorOn, deviceOrSkip } from './testDevice.js';

const MAP_READ = 0x0001;
const COPY_SRC = 0x0004;
const COPY_DST = 0x0008;
const STORAGE = 0x0080;

async function readBuffer(device: GPUDevice, buffer: GPUBuffer, offset: number, size: number): Promise<Uint8Array> {
  const staging = device.createBuffer({ size, usage: MAP_READ | COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, offset, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(1);
  const bytes = new Uint8Array(staging.getMappedRange()).slice();
  staging.destroy();
  return bytes;
}

describe('WebGpuAllocator (review 3)', function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  /** Devices of their own and their GPU objects, kept alive to the end (Dawn crashes if the GPU object goes first). */
  const keep: unknown[] = [];
  before(async function () {
    context = await deviceOrSkip(this);
  });

  it("runs a batched copy before the program's later queue.writeBuffer to the same block, in program order", async () => {
    using allocator = allocatorOn(context);
    const a = allocator.allocate(256);
    const b = allocator.allocate(256);
    allocator.writeBytes(a, new Uint8Array(256).fill(1));
    allocator.writeBytes(b, new Uint8Array(256).fill(2));
    allocator.copyData(a, b, 256); // recorded in the pending encoder (Note [Batched copies])
    const { buffer, offset } = allocator.bindingOf(a);
    context.device.queue.writeBuffer(buffer, offset, new Uint8Array(256).fill(3)); // the program overwrites a afterwards
    const back = await allocator.readBytes(a, 0, 4);
    expect([...back], 'the later writeBuffer wins').to.deep.equal([3, 3, 3, 3]);
  });

  it("keeps another allocator's freed block out of reuse when one allocator's emptyCache forces an epoch", async () => {
    const device = context.device;
    using one = allocatorOn(context, { preset: 'pytorch' });
    using two = allocatorOn(context, { preset: 'pytorch' });
    const mine = one.allocate(256);
    one.free(mine); // a pending free in the first allocator: its emptyCache will synchronize it
    const p = two.allocate(256);
    two.writeBytes(p, new Uint8Array(256).fill(0xaa));
    const out = device.createBuffer({ size: 256, usage: COPY_SRC | COPY_DST });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(p.handle as GPUBuffer, p.byteOffset, out, 0, 256); // recorded, not submitted
    two.free(p);
    one.emptyCache(); // the first allocator under pressure; says nothing about the second one's encoders
    const q = two.allocate(256);
    two.writeBytes(q, new Uint8Array(256).fill(0xbb));
    device.queue.submit([encoder.finish()]);
    expect([...(await readBuffer(device, out, 0, 4))], 'the encoder reads the freed tensor, not its successor').to.deep.equal([0xaa, 0xaa, 0xaa, 0xaa]);
    out.destroy();
  });

  it('does not serve a segment the device rejected again after its pointers are freed', async () => {
    const maxBufferSize = context.device.limits.maxBufferSize;
    using allocator = createWebGpuAllocator(context, { limit: '64GiB', preset: 'pytorch' });
    Object.defineProperty(allocator.backend, 'maxBufferSize', { value: maxBufferSize * 2 });
    const errors: { error: DeviceErrorType; ptrs: readonly DataPtr[] }[] = [];
    allocator.events.on('deviceError', (e) => errors.push(e));
    const ptr = allocator.allocate(maxBufferSize + (2 << 20));
    const rejected = ptr.handle;
    await allocator.flush();
    await new Promise((r) => setTimeout(r, 50));
    expect(errors).to.have.length(1);
    allocator.free(ptr); // the program drops the pointers the event named
    context.device.queue.submit([]);
    const again = allocator.allocate(maxBufferSize + (2 << 20));
    await allocator.flush();
    await new Promise((r) => setTimeout(r, 50));
    const reported = errors.some((e) => e.ptrs.includes(again));
    expect(again.handle !== rejected || reported, 'the new pointer is not carved silently from the rejected buffer').to.equal(true);
  });

  it("leaves the program's own queue.submit wrapper in place when the allocator is disposed", async function () {
    const own = await openWebGpuDevice().catch(() => undefined);
    if (!own) this.skip();
    keep.push(own);
    const queue = own!.device.queue;
    const original = queue.submit;
    let submits = 0;
    const tracing = function (this: GPUQueue, buffers: Iterable<GPUCommandBuffer>): undefined {
      submits++;
      return original.call(this, buffers);
    };
    queue.submit = tracing; // e.g. a profiler installed before the allocator
    try {
      const allocator = createWebGpuAllocator(own!, { limit: '64MiB' });
      allocator.dispose();
      expect(queue.submit, "the program's wrapper").to.equal(tracing);
      queue.submit([]);
      expect(submits).to.equal(1);
    } finally {
      own!.device.destroy();
    }
  });

  /** A device of its own whose maxBufferSize is 384 MiB (allowed by WebGPU; not a power of two). */
  async function deviceWith384MiBBuffers(mocha: Mocha.Context): Promise<WebGpuContext> {
    const own = await openWebGpuDevice().catch(() => undefined);
    if (!own?.keepAlive) mocha.skip();
    keep.push(own);
    own!.device.destroy();
    const gpu = own!.keepAlive as GPU;
    const adapter = (await gpu.requestAdapter())!;
    const device = await adapter.requestDevice({ requiredLimits: { maxBufferSize: 384 << 20, maxStorageBufferBindingSize: 384 << 20 } });
    expect(device.limits.maxBufferSize).to.equal(384 << 20);
    const context = { device, adapterInfo: 'own', keepAlive: gpu, owned: true };
    keep.push(context);
    return context;
  }

  it('reads back a tensor larger than half of a maxBufferSize that is not a power of two', async function () {
    const own = await deviceWith384MiBBuffers(this);
    try {
      using allocator = createWebGpuAllocator(own, { limit: '1GiB' });
      const n = 300 << 20; // fits one buffer; a readback buffer rounded up to 512 MiB does not
      const ptr = allocator.allocate(n);
      allocator.writeBytes(ptr, new Uint8Array([1, 2, 3, 4]), n - 4);
      expect([...(await allocator.readBytes(ptr, n - 4, 4))], 'a 4-byte read works').to.deep.equal([1, 2, 3, 4]);
      let failure: unknown;
      const whole = await allocator.readBytes(ptr).catch((e: unknown) => ((failure = e), undefined));
      expect((failure as Error | undefined)?.message, 'reading the whole tensor').to.equal(undefined);
      expect([...whole!.subarray(n - 4)]).to.deep.equal([1, 2, 3, 4]);
    } finally {
      own.device.destroy();
    }
  });

  it('writes an unaligned run larger than half of a maxBufferSize that is not a power of two', async function () {
    const own = await deviceWith384MiBBuffers(this);
    try {
      using allocator = createWebGpuAllocator(own, { limit: '1GiB' });
      const n = 300 << 20;
      const ptr = allocator.allocate(n);
      const bytes = new Uint8Array(n - 1).fill(9); // odd length: through the scratch buffer, rounded up to 512 MiB
      own.device.pushErrorScope('validation');
      allocator.writeBytes(ptr, bytes, 1);
      const error = await own.device.popErrorScope();
      expect(error?.message, 'the write was valid').to.equal(undefined);
      expect([...(await allocator.readBytes(ptr, n - 4, 4))]).to.deep.equal([9, 9, 9, 9]);
    } finally {
      own.device.destroy();
    }
  });

  it('reads and writes an imported buffer whose size is not a multiple of 4, or says it cannot', async () => {
    using allocator = allocatorOn(context);
    const device = context.device;
    const other = allocator.allocate(16);
    allocator.writeBytes(other, new Uint8Array(16).fill(0x77));
    expect((await allocator.readBytes(other))[0]).to.equal(0x77); // leaves a 256-byte staging buffer in the pool
    const buffer = device.createBuffer({ size: 10, usage: STORAGE | COPY_SRC | COPY_DST });
    try {
      device.queue.writeBuffer(buffer, 0, new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]));
      expect(() => allocator.importBuffer(buffer), 'the last 2 bytes cannot be copied').to.throw(InvalidArgumentError, /whole 4-byte words/);
      const ptr = allocator.importBuffer(buffer, { byteLength: 8 });
      expect([...(await allocator.readBytes(ptr))], 'the imported bytes, not a previous read left in the staging buffer').to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8]);
      allocator.writeBytes(ptr, new Uint8Array([9, 9, 9]), 5); // unaligned, up to the last whole word
      expect([...(await allocator.readBytes(ptr))]).to.deep.equal([1, 2, 3, 4, 5, 9, 9, 9]);
    } finally {
      buffer.destroy();
    }
  });

  it('rejects a read whose copy the device refused instead of returning stale staging bytes', async () => {
    using allocator = allocatorOn(context);
    const device = context.device;
    const other = allocator.allocate(16);
    allocator.writeBytes(other, new Uint8Array(16).fill(0x77));
    expect((await allocator.readBytes(other))[0]).to.equal(0x77); // leaves a staging buffer in the pool
    const buffer = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC | COPY_DST });
    const ptr = allocator.importBuffer(buffer);
    buffer.destroy(); // the caller destroyed its buffer: copying from it is a validation error
    let error: unknown;
    try {
      await allocator.readBytes(ptr);
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(DeviceError);
    expect((await allocator.readBytes(other))[0], 'the allocator still reads').to.equal(0x77);
  });

  it('refuses importBuffer after dispose with a DisposedError', () => {
    const allocator = allocatorOn(context);
    allocator.dispose();
    const buffer = context.device.createBuffer({ size: 256, usage: STORAGE | COPY_SRC | COPY_DST });
    try {
      expect(() => allocator.importBuffer(buffer)).to.throw(DisposedError);
    } finally {
      buffer.destroy();
    }
  });
});
