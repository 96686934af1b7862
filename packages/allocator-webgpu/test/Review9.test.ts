import { expect } from 'chai';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator } from '@stowage/allocator-webgpu';
import { allocatorOn, COPY_DST, COPY_SRC, deviceOrSkip, ownDeviceOrSkip, readBuffer } from './testDevice.js';

describe('WebGpuAllocator (review 9)', function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  /** Devices of their own and their GPU objects, kept alive to the end (Dawn crashes if the GPU object goes first). */
  const keep: unknown[] = [];
  before(async function () {
    context = await deviceOrSkip(this);
  });

  // Note [Submit epochs]: synchronizeEvent (emptyCache) sets #forcedThrough past the current epoch without a
  // submit. A free later in that same epoch records an event of the same epoch (since 2957997 the very same
  // object, #lastEvent), which #forcedThrough already marks complete: the block goes back to the pool at once,
  // though work the program recorded after the emptyCache and has not submitted yet still reads it.
  it('keeps a block freed after emptyCache out of reuse until the next submit, in the same submit epoch', async () => {
    const device = context.device;
    using allocator = allocatorOn(context, { preset: 'pytorch' });
    allocator.free(allocator.allocate(256)); // a pending free: this epoch's event
    allocator.emptyCache(); // synchronizes it; no counted submit, so the epoch stays the same
    const p = allocator.allocate(256);
    allocator.writeBytes(p, new Uint8Array(256).fill(0xaa));
    const out = device.createBuffer({ size: 256, usage: COPY_SRC | COPY_DST });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(p.handle as GPUBuffer, p.byteOffset, out, 0, 256); // recorded after emptyCache, not submitted
    allocator.free(p);
    const q = allocator.allocate(256);
    allocator.writeBytes(q, new Uint8Array(256).fill(0xbb)); // writeBuffer runs on the queue at once
    device.queue.submit([encoder.finish()]);
    expect([...(await readBuffer(device, out, 0, 4))], 'the encoder reads the freed tensor, not its successor').to.deep.equal([0xaa, 0xaa, 0xaa, 0xaa]);
    out.destroy();
  });

  // SubmitCounter (2feb701) walks its before-submit flushes by index while removeBeforeSubmit splices the array:
  // a flush that leads to another allocator's dispose (here through the program's own queue.submit wrapper,
  // installed before the allocators, which the backends' own submits pass through) shifts the next flush onto
  // the index just run, and it is skipped. The Set iterated before visited every flush still registered.
  it("runs every allocator's batched copies before the program's submit, though one allocator is disposed during the flushes", async function () {
    const own = await ownDeviceOrSkip(this);
    keep.push(own);
    const device = own.device;
    const queue = device.queue;
    const original = queue.submit;
    let afterSubmit: (() => void) | undefined;
    queue.submit = function (this: GPUQueue, buffers: Iterable<GPUCommandBuffer>): undefined {
      original.call(this, buffers);
      const hook = afterSubmit;
      afterSubmit = undefined;
      hook?.();
      return undefined;
    }; // e.g. a profiler installed before the allocators
    try {
      const one = createWebGpuAllocator(own!, { limit: '64MiB' });
      using two = createWebGpuAllocator(own!, { limit: '64MiB' });
      const x = one.allocate(256);
      const y = one.allocate(256);
      const a = two.allocate(256);
      const b = two.allocate(256);
      two.writeBytes(a, new Uint8Array(256).fill(0x11));
      two.writeBytes(b, new Uint8Array(256).fill(0x22));
      one.copyData(y, x, 256); // pending in the first allocator's encoder
      two.copyData(b, a, 256); // pending in the second's: b now holds 0x11 in program order
      afterSubmit = () => one.dispose(); // the first allocator's flush submits through the wrapper
      const out = device.createBuffer({ size: 256, usage: COPY_SRC | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(b.handle as GPUBuffer, b.byteOffset, out, 0, 256);
      queue.submit([encoder.finish()]);
      expect([...(await readBuffer(device, out, 0, 4))], "the second allocator's copy ran before the program's work").to.deep.equal([0x11, 0x11, 0x11, 0x11]);
      out.destroy();
    } finally {
      device.destroy();
    }
  });
});
