import { spawnSync } from 'node:child_process';
import { expect } from 'chai';
import type { DataPtr, DeviceError as DeviceErrorType, Plugin } from '@stowage/core';
import type { MemoryReclaimer } from '@stowage/core/plugin-kit';
import { BackendUnavailableError, cpu, createCpuAllocator, createRuntime, DeviceError, DisposedError, DeviceMismatchError, InvalidArgumentError, OutOfMemoryError, StowageError, UseAfterReleaseError, wrapAllocators } from '@stowage/core';
import { IpcCollector, LmsReclaimer, makeDirectAllocator } from '@stowage/core/plugin-kit';
import { adaptorCases, patternBytes } from '@stowage/core/testing';
import type { WebGpuContext, WebGpuOptions } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, fromGpuBuffer, openWebGpuDevice, webgpu, WebGpuAllocator, WebGpuBuffers, WebGpuMemoryBackend } from '@stowage/allocator-webgpu';
import { refuseSegments } from '@stowage/lab/browser';
import { allocatorOn, COPY_DST, COPY_SRC, deviceOrSkip, MAP_READ, ownDeviceOrSkip, readBuffer, STORAGE } from './testDevice.js';


describe('WebGpuAllocator', function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  /** Devices of their own and their GPU objects, kept alive to the end (Dawn crashes if the GPU object goes first). */
  const keep: unknown[] = [];
  before(async function () {
    context = await deviceOrSkip(this);
  });

  describe('#allocate', () => {
    it('carves tensors out of one GPUBuffer segment at binding-aligned offsets', () => {
      using allocator = allocatorOn(context);
      const a = allocator.allocate(1000);
      const b = allocator.allocate(3000);
      expect(a.handle).to.equal(b.handle);
      expect((a.handle as GPUBuffer).size, 'Note [WebGPU segment sizing]: a 416 KiB segment first').to.equal(416 << 10);
      expect(b.byteOffset % context.device.limits.minStorageBufferOffsetAlignment).to.equal(0);
      expect(allocator.bindingOf(b)).to.deep.equal({ buffer: b.handle, offset: b.byteOffset, size: 3000 });
      expect(allocator.backend.createdBuffers).to.equal(1);
    });

    it('keeps storage and uniform blocks in separate segments and rejects usages it cannot serve', () => {
      using allocator = allocatorOn(context);
      const s = allocator.allocate(256);
      const u = allocator.allocate(256, { usage: 'uniform' });
      expect(s.handle).to.not.equal(u.handle);
      expect(((u.handle as GPUBuffer).usage & 0x0040) !== 0).to.equal(true);
      expect((u.handle as GPUBuffer).size, 'Note [WebGPU segment sizing]: a 16 KiB uniform segment first').to.equal(16 << 10);
      const before = allocator.memoryStats();
      expect(() => allocator.allocate(256, { usage: 'vertex' })).to.throw(InvalidArgumentError, /options.usage/);
      expect(() => allocator.allocate(256, { usage: 'readback' })).to.throw(InvalidArgumentError, /Runtime#read/);
      expect(() => allocator.allocate(256, { shared: true }), 'GPU memory is never host shared memory').to.throw(InvalidArgumentError, /options\.shared/);
      expect(allocator.allocate(256, { shared: false }).byteLength, 'the default is served').to.equal(256);
      expect(allocator.memoryStats()['allocation.all.current']).to.equal(before['allocation.all.current'] + 1);
      expect(allocator.allocate(256).byteLength).to.equal(256);
    });

    it('answers a request over maxBufferSize with an OutOfMemoryError that names the limit, and keeps working', () => {
      using allocator = allocatorOn(context, { limit: '64GiB' });
      const tooBig = context.device.limits.maxBufferSize + 1;
      expect(() => allocator.allocate(tooBig)).to.throw(OutOfMemoryError, /maxBufferSize/);
      expect(allocator.allocate(1024).byteLength).to.equal(1024);
    });

    it('falls back to a smaller segment when a large one would pass the budget', () => {
      using allocator = allocatorOn(context, { limit: '40MiB' });
      allocator.allocate(33 << 20); // a segment of its own, 34 MiB; 6 MiB of the budget left
      expect(allocator.allocate(1 << 20).byteLength, 'a 4 MiB segment (an eighth of the budget, in 2 MiB steps) still fits').to.equal(1 << 20);
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.be.at.most(40 << 20);
    });

    it('runs out of its budget with an OutOfMemoryError after releasing its cache', () => {
      using allocator = allocatorOn(context, { limit: '40MiB', preset: 'pytorch' });
      const a = allocator.allocate(30 << 20);
      expect(() => allocator.allocate(20 << 20)).to.throw(OutOfMemoryError, /budget is 40\.00 MiB/);
      allocator.free(a);
      expect(allocator.allocate(20 << 20).byteLength).to.equal(20 << 20);
    });

    // A usage is one of the names the allocator knows, never a member that every object inherits ('toString',
    // 'constructor', '__proto__'): such a name is refused before WebGpuMemoryBackend.malloc pushes its two error
    // scopes, so none is left on the device's error-scope stack to swallow later errors the program does not catch
    // itself. After allocate(256, { usage: 'toString' }), device.popErrorScope() rejects on an empty stack.
    it("rejects a usage named like an Object.prototype member ('toString') with InvalidArgumentError and leaves the device's error scopes balanced", async () => {
      using allocator = allocatorOn(context);
      const device = context.device;
      const before = allocator.memoryStats();
      let thrown: unknown;
      try {
        allocator.allocate(256, { usage: 'toString' });
      } catch (error) {
        thrown = error;
      }
      // Pop what a failed allocation may have left on the stack (and clean it up for the tests after this one).
      const leaked: boolean[] = [];
      for (let i = 0; i < 2; i++) leaked.push(await device.popErrorScope().then(() => true, () => false));
      expect(thrown, String(thrown)).to.be.instanceOf(InvalidArgumentError);
      expect(leaked, 'error scopes left pushed by the failed allocation').to.deep.equal([false, false]);
      expect(allocator.memoryStats()).to.deep.equal(before);
      const next = allocator.allocate(256);
      allocator.writeBytes(next, new Uint8Array([1, 2, 3, 4]));
      expect([...(await allocator.readBytes(next, 0, 4))], 'the device stays usable').to.deep.equal([1, 2, 3, 4]);
    });
  });

  describe('#free', () => {
    it('returns a freed block to the pool only at the next submit, so an encoder recorded before the free reads the old data', async () => {
      using allocator = allocatorOn(context, { preset: 'pytorch' });
      const device = context.device;
      const a = allocator.allocate(256);
      allocator.writeBytes(a, new Uint8Array(256).fill(0xaa));
      const out = device.createBuffer({ size: 256, usage: COPY_SRC | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(a.handle as GPUBuffer, a.byteOffset, out, 0, 256); // recorded, not submitted
      allocator.free(a);
      const b = allocator.allocate(256);
      expect(b.address, 'the freed block waits for the next submit').to.not.equal(a.address);
      allocator.writeBytes(b, new Uint8Array(256).fill(0xbb));
      device.queue.submit([encoder.finish()]);
      expect([...(await readBuffer(device, out, 0, 4))]).to.deep.equal([0xaa, 0xaa, 0xaa, 0xaa]);
      const c = allocator.allocate(256);
      expect(c.address, 'after the submit the block is reused').to.equal(a.address);
      out.destroy();
    });

    it('reuses at once a block freed inside freeingSubmitted after the submit that used it, without a second deferral', async () => {
      using allocator = allocatorOn(context, { preset: 'pytorch' });
      const device = context.device;
      const a = allocator.allocate(256);
      allocator.writeBytes(a, new Uint8Array(256).fill(0xaa));
      const out = device.createBuffer({ size: 256, usage: COPY_SRC | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(a.handle as GPUBuffer, a.byteOffset, out, 0, 256);
      device.queue.submit([encoder.finish()]); // the last use of `a` is submitted
      const returned = allocator.freeingSubmitted(() => {
        allocator.free(a);
        return 'freed';
      });
      expect(returned).to.equal('freed');
      const b = allocator.allocate(256);
      expect(b.address, 'reused without waiting for another submit').to.equal(a.address);
      allocator.writeBytes(b, new Uint8Array(256).fill(0xbb)); // runs after the submitted copy
      expect([...(await readBuffer(device, out, 0, 4))], 'the submitted copy read the old bytes').to.deep.equal([0xaa, 0xaa, 0xaa, 0xaa]);
      const c = allocator.allocate(256);
      allocator.free(c); // outside freeingSubmitted: deferred as before
      expect(allocator.allocate(256).address, 'an ordinary free still waits for the next submit').to.not.equal(c.address);
      out.destroy();
    });

    it('reuses a block freed since the last submit instead of reporting out of memory at the limit', () => {
      // 8 MiB segments, larger requests in their own: a, b and c share one, so that freeing a releases no segment.
      using allocator = allocatorOn(context, { limit: '64MiB', segmentSize: (bytes: number) => Math.max(bytes, 8 << 20) });
      const a = allocator.allocate(2 << 20);
      allocator.allocate(2 << 20);
      allocator.allocate(4 << 20); // the 8 MiB segment is full, and split
      allocator.allocate(56 << 20); // a segment of its own: the budget is spent
      allocator.free(a); // waits for the next submit (Note [Submit epochs])
      const again = allocator.allocate(2 << 20);
      expect(again.handle).to.equal(a.handle);
      allocator.engine.assertInvariants();
    });

    // Note [Submit epochs]: synchronizeEvent (emptyCache) completes the events recorded so far without a submit. A
    // free later in that same epoch records an event of the same epoch (the very same object, #lastEvent) but of a
    // later generation (the synchronizations before it), which that synchronization does not complete: the block
    // stays out of the pool until the next submit, since work the program recorded after the emptyCache and has
    // not submitted yet still reads it.
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
  });

  describe('makeDirectAllocator over the WebGPU backend', () => {
    it('keeps a freed buffer alive until the next submit, so recorded work can still read it', async () => {
      const backend = new WebGpuMemoryBackend({ device: context.device, capacityBytes: 64 << 20 });
      using direct = makeDirectAllocator(backend);
      const a = direct.allocate(256);
      direct.writeBytes(a, new Uint8Array(256).fill(0x5a));
      const out = context.device.createBuffer({ size: 256, usage: COPY_SRC | COPY_DST });
      const encoder = context.device.createCommandEncoder();
      encoder.copyBufferToBuffer(a.handle as GPUBuffer, 0, out, 0, 256);
      direct.free(a);
      direct.allocate(64); // does not destroy the freed buffer: no submit happened yet
      expect(backend.reservedBytes).to.equal(256 + 64);
      context.device.queue.submit([encoder.finish()]);
      expect([...(await readBuffer(context.device, out, 0, 4))]).to.deep.equal([0x5a, 0x5a, 0x5a, 0x5a]);
      direct.allocate(64); // after the submit the freed buffer goes back
      expect(backend.reservedBytes).to.equal(64 + 64);
      out.destroy();
    });
  });

  describe('#emptyCache and #flush', () => {
    it('destroys released segments and gives their memory back once the queue has moved on', async () => {
      using allocator = allocatorOn(context, { preset: 'pytorch' });
      const rss = (): number => process.memoryUsage().rss;
      const before = rss();
      const big = allocator.allocate(200 << 20);
      const chunk = new Uint8Array(4 << 20).fill(1);
      for (let offset = 0; offset < 200 << 20; offset += chunk.byteLength) allocator.writeBytes(big, chunk, offset);
      await allocator.flush();
      const withSegment = rss();
      expect(withSegment - before, 'the written segment is resident').to.be.greaterThan(150 << 20);
      allocator.free(big);
      context.device.queue.submit([]);
      allocator.emptyCache();
      expect(allocator.backend.reservedBytes).to.equal(0);
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
      // The driver frees after the queue moves on; other tests' garbage can move RSS too, so poll a little.
      let released = 0;
      for (let i = 0; i < 20 && released <= 0.75 * (withSegment - before); i++) {
        await allocator.flush();
        await new Promise((r) => setTimeout(r, 10));
        released = withSegment - rss();
      }
      expect(released, 'resident memory went down by most of the segment').to.be.greaterThan(0.75 * (withSegment - before));
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

    it('destroys the scratch and readback buffers of host transfers in emptyCache, and makes new ones when needed', async () => {
      using allocator = allocatorOn(context);
      const device = context.device;
      const labels: string[] = [];
      const create = device.createBuffer.bind(device);
      device.createBuffer = (descriptor: GPUBufferDescriptor): GPUBuffer => {
        labels.push(descriptor.label ?? '');
        return create(descriptor);
      };
      try {
        const ptr = allocator.allocate(64);
        allocator.writeBytes(ptr, new Uint8Array([1, 2, 3]), 1); // unaligned: through the scratch buffer
        expect([...(await allocator.readBytes(ptr, 0, 4))]).to.deep.equal([0, 1, 2, 3]); // a pooled readback buffer
        const made = labels.length;
        allocator.writeBytes(ptr, new Uint8Array([4]), 5);
        await allocator.readBytes(ptr, 0, 4);
        expect(labels.length, 'reused while cached').to.equal(made);
        allocator.emptyCache();
        allocator.writeBytes(ptr, new Uint8Array([5, 6, 7]), 1);
        expect([...(await allocator.readBytes(ptr, 0, 8))]).to.deep.equal([0, 5, 6, 7, 0, 4, 0, 0]);
        expect(labels.slice(made).sort(), 'both made again after emptyCache').to.deep.equal(['stowage readback', 'stowage scratch']);
      } finally {
        delete (device as { createBuffer?: unknown }).createBuffer;
      }
    });
  });

  describe('#writeBytes, #readBytes and #copyData', () => {
    it('round-trips bytes at any offset and length, aligned or not', async () => {
      using allocator = allocatorOn(context);
      const ptr = allocator.allocate(64);
      allocator.writeBytes(ptr, new Uint8Array(64));
      const expected = new Uint8Array(64);
      for (const [offset, length] of [[0, 16], [1, 3], [5, 7], [13, 1], [30, 17], [62, 2]] as const) {
        const bytes = patternBytes(length, offset);
        allocator.writeBytes(ptr, bytes, offset);
        expected.set(bytes, offset);
      }
      expect([...(await allocator.readBytes(ptr))]).to.deep.equal([...expected]);
      expect([...(await allocator.readBytes(ptr, 5, 9))]).to.deep.equal([...expected.slice(5, 14)]);
    });

    it('copies between blocks of one segment and of different segments, at odd offsets', async () => {
      using allocator = allocatorOn(context, { preset: 'pytorch' });
      const src = allocator.allocate(4096);
      const same = allocator.allocate(4096);
      const other = allocator.allocate(70 << 20);
      expect(same.handle).to.equal(src.handle);
      expect(other.handle).to.not.equal(src.handle);
      const data = patternBytes(4096, 7);
      allocator.writeBytes(src, data);
      allocator.writeBytes(same, new Uint8Array(4096));
      allocator.writeBytes(other, new Uint8Array(4096));
      allocator.copyData(same, src, 1000, 3, 5);
      allocator.copyData(other, src, 4096);
      allocator.copyData(other, src, 6, 1, 2);
      const expectSame = new Uint8Array(4096);
      expectSame.set(data.subarray(5, 1005), 3);
      const expectOther = data.slice();
      expectOther.set(data.subarray(2, 8), 1);
      expect([...(await allocator.readBytes(same))]).to.deep.equal([...expectSame]);
      expect([...(await allocator.readBytes(other, 0, 4096))]).to.deep.equal([...expectOther]);
    });

    it("batches copies into one submit that runs before the program's next submit", async () => {
      using allocator = allocatorOn(context);
      const device = context.device;
      const src = allocator.allocate(4096);
      const dst = allocator.allocate(4096);
      const data = patternBytes(4096, 11);
      allocator.writeBytes(src, data);
      const submitsBefore = allocator.backend.submitCount;
      for (let i = 0; i < 1024; i++) allocator.copyData(dst, src, 4, 4 * (1023 - i), 4 * i); // reverse the words
      const out = device.createBuffer({ size: 4096, usage: COPY_SRC | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(dst.handle as GPUBuffer, dst.byteOffset, out, 0, 4096);
      device.queue.submit([encoder.finish()]); // must see every batched copy
      expect(allocator.backend.submitCount - submitsBefore, 'only the program submitted (one epoch)').to.equal(1);
      const got = await readBuffer(device, out, 0, 4096);
      const words = new Uint32Array(data.buffer.slice(0));
      expect([...new Uint32Array(got.buffer)]).to.deep.equal([...words].reverse());
      out.destroy();
    });

    it('rejects released pointers, overlong writes and pointers of another device, and the device stays usable', async () => {
      using allocator = allocatorOn(context);
      using cpu = createCpuAllocator();
      const ptr = allocator.allocate(16);
      expect(() => allocator.writeBytes(ptr, new Uint8Array(17))).to.throw(InvalidArgumentError, /16 bytes/);
      expect(() => allocator.copyData(ptr, cpu.allocate(16), 16)).to.throw(DeviceMismatchError);
      allocator.free(ptr);
      let rejected: unknown;
      await allocator.readBytes(ptr).catch((e: unknown) => (rejected = e));
      expect(rejected).to.be.instanceOf(UseAfterReleaseError);
      const next = allocator.allocate(16);
      allocator.writeBytes(next, new Uint8Array([1, 2, 3, 4]), 4);
      expect([...(await allocator.readBytes(next, 4, 4))]).to.deep.equal([1, 2, 3, 4]);
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

    // SubmitCounter runs every before-submit flush still registered, though a flush leads to another allocator's
    // dispose (here through the program's own queue.submit wrapper, installed before the allocators, which the
    // backends' own submits pass through) and so to removeBeforeSubmit while the walk is in progress.
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

    it('writes an unaligned run of more than 16 MiB completely (the byte-copy kernel stays within the dispatch limit)', async () => {
      using allocator = allocatorOn(context);
      const n = (16 << 20) + 1; // odd length: the byte-copy kernel path, first chunk at its maximum
      const ptr = allocator.allocate(n);
      const bytes = new Uint8Array(n);
      for (let i = 0; i < n; i++) bytes[i] = (i * 7 + 3) & 0xff;
      context.device.pushErrorScope('validation');
      allocator.writeBytes(ptr, bytes);
      const error = await context.device.popErrorScope();
      expect(error?.message, 'the dispatch was valid').to.equal(undefined);
      const back = await allocator.readBytes(ptr);
      let firstBad = -1;
      for (let i = 0; i < n && firstBad < 0; i++) if (back[i] !== bytes[i]) firstBad = i;
      expect(firstBad, 'first byte that differs').to.equal(-1);
    });

    it('keeps readback and scratch buffers within a maxBufferSize that is not a power of two', async () => {
      // A device whose buffers hold at most 3 MiB + 4 KiB: a 2.5 MiB transfer rounded up to a power of two (4 MiB)
      // would be over it. The real device allows more, so the check is on the sizes asked of it.
      const maxBufferSize = 3 * 2 ** 20 + 4096;
      const device = context.device;
      const backend = new WebGpuMemoryBackend({ device, capacityBytes: 64 * 2 ** 20, maxBufferSize });
      using allocator = new WebGpuAllocator(backend, { preset: 'pytorch', segmentSize: (rounded: number) => rounded });
      const sizes: number[] = [];
      const create = device.createBuffer.bind(device);
      device.createBuffer = (descriptor: GPUBufferDescriptor): GPUBuffer => {
        sizes.push(descriptor.size);
        return create(descriptor);
      };
      try {
        const n = 2.5 * 2 ** 20;
        const ptr = allocator.allocate(n);
        const bytes = new Uint8Array(n - 1).map((_, i) => i % 251);
        allocator.writeBytes(ptr, bytes, 1); // odd length: through the scratch buffer
        const back = await allocator.readBytes(ptr); // through a readback buffer
        expect(back.subarray(1).every((b, i) => b === i % 251), 'the bytes written come back').to.equal(true);
        expect(Math.max(...sizes), 'no buffer asked for is over maxBufferSize').to.be.at.most(maxBufferSize);
      } finally {
        delete (device as { createBuffer?: unknown }).createBuffer;
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

    // The spec allows SharedArrayBuffer-backed data in queue.writeBuffer, but the `webgpu` package (Dawn for Node)
    // dies with SIGSEGV on it, so such bytes must not reach queue.writeBuffer as they are, on the whole-word path
    // as on the unaligned one (which copies into a fresh `padded` array). Such bytes are ordinary in Stowage: cpu
    // storages with `shared: true`, IPC's shared memory. The write runs in a child, so that a crash does not take
    // mocha with it.
    it('writes bytes backed by a SharedArrayBuffer without crashing the process', function () {
      const script = `
        const { openWebGpuDevice, createWebGpuAllocator } = await import(${JSON.stringify(new URL('../dist/index.js', import.meta.url).href)});
        let context;
        try { context = await openWebGpuDevice(); } catch (e) { console.log('NO-ADAPTER ' + e.message); process.exit(0); }
        const allocator = createWebGpuAllocator(context, { limit: '64MiB' });
        const ptr = allocator.allocate(16);
        const shared = new Uint8Array(new SharedArrayBuffer(16));
        for (let i = 0; i < 16; i++) shared[i] = i + 1; // (map() would make a non-shared copy)
        allocator.writeBytes(ptr, shared);
        console.log('BACK ' + [...(await allocator.readBytes(ptr))].join(','));
        process.exit(0);
      `;
      const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env: process.env, encoding: 'utf8', timeout: 60_000 });
      if (child.stdout.includes('NO-ADAPTER')) {
        console.log(`    skipped: no WebGPU adapter in the child — ${child.stdout.trim()}`);
        this.skip();
      }
      expect(child.signal, `the child died: ${child.stderr.slice(0, 300)}`).to.equal(null);
      expect(child.stdout).to.contain('BACK 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16');
    });

    // A read's validation scope covers its own copy only, not the copies batched in the pending encoder before it:
    // a copyData from an imported buffer the caller has destroyed (a program error) does not make an unrelated
    // read of a healthy tensor reject ("Reading 4 B back ... failed: used in submit while destroyed").
    it('reads a healthy tensor though an unrelated batched copy before it is invalid', async () => {
      using allocator = allocatorOn(context);
      const device = context.device;
      const good = allocator.allocate(256);
      allocator.writeBytes(good, new Uint8Array(256).fill(0x42));
      const buffer = device.createBuffer({ size: 256, usage: STORAGE | COPY_SRC | COPY_DST });
      const imported = allocator.importBuffer(buffer);
      buffer.destroy();
      const other = allocator.allocate(256);
      allocator.copyData(other, imported, 256); // batched; invalid, since the buffer was destroyed
      let error: unknown;
      let back: Uint8Array | undefined;
      try {
        back = await allocator.readBytes(good, 0, 4);
      } catch (e) {
        error = e;
      }
      expect(error, String(error)).to.equal(undefined);
      expect([...back!]).to.deep.equal([0x42, 0x42, 0x42, 0x42]);
    });

    // Every runtime's single WebGPU device is `webgpu:0`, so two allocators on different GPUDevices share a Device
    // descriptor, and the device check alone would let one's pointers into the other's copyData/writeBytes, where a
    // GPUBuffer of another GPUDevice fails validation outside any error scope and the copy or write silently does
    // nothing. A storage from another device gets a typed error instead.
    it('rejects pointers of an allocator on another GPUDevice in copyData and writeBytes with a typed error', async function () {
      const own = await ownDeviceOrSkip(this);
      keep.push(own);
      using mine = allocatorOn(context);
      using theirs = createWebGpuAllocator(own, { limit: '64MiB' });
      const a = mine.allocate(256);
      const b = theirs.allocate(256);
      mine.writeBytes(a, new Uint8Array(256).fill(1));
      theirs.writeBytes(b, new Uint8Array(256).fill(2));
      await mine.flush();
      expect(() => mine.copyData(a, b, 256), 'copy from the other device').to.throw(StowageError);
      expect(() => mine.writeBytes(b, new Uint8Array(256).fill(3)), 'write into the other device').to.throw(StowageError);
      expect(() => mine.importBuffer(b.handle as GPUBuffer, { byteOffset: b.byteOffset, byteLength: 256 }), "import of the other device's segment").to.throw(DeviceMismatchError);
      expect(() => mine.copyData(a, b, 256), 'still refused after the refused import').to.throw(DeviceMismatchError);
      expect((await theirs.readBytes(b, 0, 1))[0]).to.equal(2);
    });
  });

  describe('WebGpuBuffers (its device service, through adaptors)', () => {
    for (const adaptor of adaptorCases()) {
      it(`binds a storage's range and imports a buffer through a ${adaptor.name} over the runtime's allocator`, async () => {
        await using rt = await createRuntime({ plugins: [webgpu({ device: context.device }), wrapAllocators('webgpu', (a) => adaptor.wrap(a))] });
        const buffers = rt.service(WebGpuBuffers, 'webgpu')!;
        expect(buffers).to.be.instanceOf(WebGpuAllocator);
        expect(rt.allocator('webgpu')).to.not.equal(buffers);
        const storage = rt.storage(1000, { device: 'webgpu' });
        rt.write(storage, patternBytes(1000, 3));
        const binding = buffers.bindingOf(storage.data());
        expect(binding.size).to.equal(1000);
        expect(Buffer.from(await readBuffer(context.device, binding.buffer, binding.offset, 1000)).equals(Buffer.from(patternBytes(1000, 3)))).to.equal(true);
        const buffer = context.device.createBuffer({ size: 256, usage: STORAGE | COPY_SRC | COPY_DST });
        const imported = fromGpuBuffer(rt, buffer);
        rt.write(imported, new Uint8Array([4, 5, 6, 7]));
        expect([...(await readBuffer(context.device, buffer, 0, 4))]).to.deep.equal([4, 5, 6, 7]);
        imported.release();
        buffer.destroy();
      });
    }

    it('is absent from a device the webgpu() plugin does not serve', async () => {
      await using rt = await createRuntime({ plugins: [webgpu({ device: context.device })] });
      expect(rt.service(WebGpuBuffers, 'cpu')).to.equal(undefined);
      expect(() => fromGpuBuffer(rt, context.device.createBuffer({ size: 16, usage: STORAGE }), { device: 'cpu' })).to.throw(InvalidArgumentError, /webgpu\(\) plugin/);
    });
  });

  describe('#importBuffer', () => {
    it("wraps a caller's GPUBuffer without copying and never destroys it", async () => {
      await using rt = await createRuntime({ plugins: [webgpu({ device: context.device })] });
      const allocator = rt.allocator('webgpu') as ReturnType<typeof createWebGpuAllocator>;
      const buffer = context.device.createBuffer({ size: 1024, usage: STORAGE | COPY_SRC | COPY_DST });
      const storage = fromGpuBuffer(rt, buffer, { byteOffset: 256, byteLength: 512 });
      expect(storage.byteLength).to.equal(512);
      rt.write(storage, new Uint8Array([9, 8, 7, 6, 5]));
      expect([...(await rt.read(storage)).slice(0, 5)]).to.deep.equal([9, 8, 7, 6, 5]);
      expect([...(await readBuffer(context.device, buffer, 256, 8)).slice(0, 5)]).to.deep.equal([9, 8, 7, 6, 5]);
      storage.release();
      context.device.queue.writeBuffer(buffer, 0, new Uint8Array([1, 2, 3, 4]));
      expect([...(await readBuffer(context.device, buffer, 0, 4))]).to.deep.equal([1, 2, 3, 4]);
      expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
      expect(() => allocator.importBuffer(buffer, { byteOffset: 2 })).to.throw(InvalidArgumentError, /multiple of 4/);
      expect(() => allocator.importBuffer(buffer, { byteLength: 2048 })).to.throw(InvalidArgumentError);
      buffer.destroy();
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

    // Unaligned writes go through the byte-copy kernel, which binds the destination as a storage buffer, and aligned
    // copies are batched (Note [Batched copies]) and submitted later: a buffer without STORAGE usage would fail
    // createBindGroup outside any error scope (the write silently does nothing), and a mappable buffer
    // (MAP_READ | COPY_DST) could be pending a map when the batch is submitted (the copy fails, uncaptured, and the
    // map reads zeros). So importBuffer takes only STORAGE | COPY_SRC | COPY_DST buffers.
    it('refuses to import a buffer without STORAGE | COPY_SRC | COPY_DST usage (no storage binding, or mappable) with InvalidArgumentError naming the usage', () => {
      using allocator = allocatorOn(context);
      for (const usage of [COPY_SRC | COPY_DST, MAP_READ | COPY_DST, STORAGE | COPY_DST]) {
        const buffer = context.device.createBuffer({ size: 256, usage });
        try {
          expect(() => allocator.importBuffer(buffer), `usage 0x${usage.toString(16)}`)
            .to.throw(InvalidArgumentError, /buffer\.usage must be a buffer with STORAGE \| COPY_SRC \| COPY_DST usage/);
        } finally {
          buffer.destroy();
        }
      }
      expect(allocator.engine.memoryStats()['allocation.all.current'], 'nothing was allocated').to.equal(0);
    });

    // A pointer importBuffer returned is this allocator's to forget: allocator.free(imported) passes the ownership
    // check (no ForeignPointerError) and, as the docs say, only forgets it (its deleter does nothing), leaving the
    // caller's buffer alive.
    it('frees a pointer importBuffer returned (forgetting it, the buffer untouched)', async () => {
      using allocator = allocatorOn(context);
      const device = context.device;
      const buffer = device.createBuffer({ size: 256, usage: STORAGE | COPY_SRC | COPY_DST });
      try {
        device.queue.writeBuffer(buffer, 0, new Uint8Array([5, 6, 7, 8]));
        const ptr = allocator.importBuffer(buffer);
        allocator.free(ptr);
        expect(ptr.isReleased).to.equal(true);
        expect([...(await readBuffer(device, buffer, 0, 4))], 'the buffer is not destroyed').to.deep.equal([5, 6, 7, 8]);
      } finally {
        buffer.destroy();
      }
    });

    // importBuffer checks its options as core's own entry points do (allocate: checkOptions): `null` is an
    // InvalidArgumentError, not a bare TypeError ("Cannot read properties of null"). The same goes for
    // fromGpuBuffer's options (`options.device`).
    it('rejects null import options with InvalidArgumentError', () => {
      using allocator = allocatorOn(context);
      const buffer = context.device.createBuffer({ size: 256, usage: STORAGE | COPY_SRC | COPY_DST });
      try {
        expect(() => allocator.importBuffer(buffer, null as unknown as object)).to.throw(InvalidArgumentError);
      } finally {
        buffer.destroy();
      }
    });
  });

  describe('#dispose', () => {
    it("leaves the program's own queue.submit wrapper in place when the allocator is disposed", async function () {
      const own = await ownDeviceOrSkip(this);
      keep.push(own);
      const queue = own.device.queue;
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
        own.device.destroy();
      }
    });
  });

  describe('pager', () => {
    it('pages a block out to host memory and back in', async () => {
      using allocator = allocatorOn(context);
      const ptr = allocator.allocate(1000);
      const data = patternBytes(1000, 3);
      allocator.writeBytes(ptr, data);
      const paged = allocator.pager!.pageOut(ptr)!; // no budget here: never refused
      allocator.writeBytes(ptr, new Uint8Array(1000)); // ordered after the page-out's copy: the copy sees `data`
      expect(paged.bytes).to.equal(null);
      const bytes = await paged.done;
      expect(paged.bytes).to.equal(bytes);
      allocator.pager!.pageIn(bytes, ptr);
      expect([...(await allocator.readBytes(ptr))]).to.deep.equal([...data]);
    });

    it('hands a paged-out block to later work at once: a write after the page-out never reaches the host copy', async () => {
      using allocator = allocatorOn(context);
      const ptr = allocator.allocate(4096);
      allocator.writeBytes(ptr, patternBytes(4096, 5));
      const place = { handle: ptr.handle, byteOffset: ptr.byteOffset };
      const paged = allocator.pager!.pageOut(ptr)!; // no budget here: never refused
      allocator.free(ptr);
      context.device.queue.submit([]); // the free's submit epoch ends: the block is reusable
      const next = allocator.allocate(4096);
      expect({ handle: next.handle, byteOffset: next.byteOffset }).to.deep.equal(place);
      allocator.writeBytes(next, new Uint8Array(4096).fill(0xee));
      expect([...(await paged.done)]).to.deep.equal([...patternBytes(4096, 5)]);
    });

    it('reports the staging bytes of page-outs in flight exactly, beside the paging reserve and the headroom left to segments, until the copies land', async () => {
      const MiB = 1 << 20;
      using allocator = allocatorOn(context, { limit: 16 * MiB, pagingReserve: 2 * MiB, segmentSize: (bytes: number) => bytes });
      const pager = allocator.pager!;
      pager.enablePaging!();
      const reserved = (): number => allocator.memoryStats()['reserved_bytes.all.current'];
      expect(pager.pagingRoom!()).to.deep.equal({ inFlightBytes: 0, reserveBytes: 2 * MiB, headroomBytes: 14 * MiB });
      const ptrs = [allocator.allocate(MiB), allocator.allocate(MiB), allocator.allocate(MiB)];
      const [one, two, three] = ptrs.map((ptr) => pager.pageOut(ptr)!);
      // Within the reserve, staging takes nothing from segments; past it, segments lose what it holds beyond.
      expect(pager.pagingRoom!()).to.deep.equal({ inFlightBytes: 3 * MiB, reserveBytes: 2 * MiB, headroomBytes: 16 * MiB - reserved() - 3 * MiB });
      await Promise.all([one!.done, two!.done, three!.done]);
      // Landed: the staging buffers are pooled, counted as room (given back when a segment needs it).
      expect(pager.pagingRoom!()).to.deep.equal({ inFlightBytes: 0, reserveBytes: 2 * MiB, headroomBytes: 14 * MiB - reserved() });
      expect(reserved()).to.equal(3 * MiB);
    });
  });

  describe('failures', () => {
    it('reports a segment the device rejected as a deviceError naming the pointers in it, and never carves from it again', async () => {
      const maxBufferSize = context.device.limits.maxBufferSize;
      using allocator = createWebGpuAllocator(context, { limit: '64GiB', preset: 'pytorch' });
      // Pretend the device allows twice its limit: the device's validation error scope catches the segment.
      Object.defineProperty(allocator.backend, 'maxBufferSize', { value: maxBufferSize * 2 });
      const errors: { error: DeviceErrorType; ptrs: readonly DataPtr[] }[] = [];
      allocator.events.on('deviceError', (e) => errors.push(e));
      const ptr = allocator.allocate(maxBufferSize + (2 << 20));
      await allocator.flush();
      await new Promise((r) => setTimeout(r, 50));
      expect(errors).to.have.length(1);
      expect(errors[0]!.error).to.be.instanceOf(DeviceError);
      expect(errors[0]!.error.message).to.match(/rejected a .* segment/);
      expect(errors[0]!.ptrs).to.deep.equal([ptr]);
      const rejected = ptr.handle;
      allocator.free(ptr); // the program drops the pointers the event named
      context.device.queue.submit([]);
      const again = allocator.allocate(maxBufferSize + (2 << 20));
      await allocator.flush();
      await new Promise((r) => setTimeout(r, 50));
      const reported = errors.some((e) => e.ptrs.includes(again));
      expect(again.handle !== rejected || reported, 'the new pointer is not carved silently from the rejected buffer').to.equal(true);
    });

    it('runs the out-of-memory chain when the device refuses a segment at once, and keeps the device', async function () {
      const own = await ownDeviceOrSkip(this);
      keep.push(own);
      using allocator = createWebGpuAllocator(own, { limit: '256MiB', segmentRefusal: 'mapped' });
      let refusals = 1;
      refuseSegments(own.device, () => refusals-- > 0);
      const ptr = allocator.allocate(64 << 20); // refused once, then served by the chain's retry
      expect(allocator.backend.refusedSegments).to.equal(1);
      allocator.writeBytes(ptr, patternBytes(4096, 9));
      expect([...(await allocator.readBytes(ptr, 0, 4096))]).to.deep.equal([...patternBytes(4096, 9)]);
      expect(allocator.backend.lostError).to.equal(undefined);
    });

    it('learns a refusal from the error scope: retires the segment, and later segments past that point run the out-of-memory chain', async function () {
      const own = await ownDeviceOrSkip(this);
      keep.push(own);
      using allocator = createWebGpuAllocator(own, { limit: '256MiB' });
      const first = allocator.allocate(32 << 20);
      const popErrorScope = own.device.popErrorScope.bind(own.device);
      let pops = 0;
      // The next segment's out-of-memory scope (popped second) reports a refusal.
      Object.defineProperty(own.device, 'popErrorScope', {
        configurable: true,
        value: (): Promise<GPUError | null> => (++pops === 2 ? popErrorScope().then(() => ({ message: 'injected: out of memory' }) as GPUError) : popErrorScope()),
      });
      const errors: DeviceErrorType[] = [];
      allocator.events.on('deviceError', (e) => errors.push(e.error));
      const refused = allocator.allocate(32 << 20);
      await allocator.flush();
      await new Promise((r) => setTimeout(r, 50));
      expect(errors.map((e) => e.message)).to.deep.equal(['The WebGPU device rejected a 32.00 MiB segment: injected: out of memory']);
      expect(allocator.backend.deviceCeilingBytes).to.equal(32 << 20);
      expect(() => allocator.allocate(32 << 20)).to.throw(OutOfMemoryError); // past the ceiling: the chain, then the error
      allocator.free(first);
      own.device.queue.submit([]);
      expect(allocator.allocate(32 << 20).byteLength).to.equal(32 << 20); // served from the cache below the ceiling
      allocator.free(refused);
      expect(allocator.backend.lostError).to.equal(undefined);
    });

    it('asks the device again once a segment went back, after even the very first segment was refused', async function () {
      const own = await ownDeviceOrSkip(this);
      keep.push(own);
      using allocator = createWebGpuAllocator(own, { limit: '256MiB' });
      const popErrorScope = own.device.popErrorScope.bind(own.device);
      let pops = 0;
      Object.defineProperty(own.device, 'popErrorScope', {
        configurable: true,
        value: (): Promise<GPUError | null> => (++pops === 2 ? popErrorScope().then(() => ({ message: 'injected: out of memory' }) as GPUError) : popErrorScope()),
      });
      const refused = allocator.allocate(32 << 20); // the first segment: refused (passingly) in its error scope
      await allocator.flush();
      await new Promise((r) => setTimeout(r, 50));
      expect(allocator.backend.deviceCeilingBytes).to.equal(0);
      allocator.free(refused); // the retired segment goes back to the device once its submit epoch ends
      own.device.queue.submit([]);
      expect(allocator.allocate(1 << 20).byteLength).to.equal(1 << 20);
      expect(allocator.backend.deviceCeilingBytes).to.equal(Number.POSITIVE_INFINITY);
    });

    it('refuses allocations with a DeviceError after the device is lost, and nothing hangs', async function () {
      const own = await ownDeviceOrSkip(this);
      const allocator = createWebGpuAllocator(own!, { limit: '64MiB' });
      const ptr = allocator.allocate(64);
      const errors: DeviceErrorType[] = [];
      allocator.events.on('deviceError', (e) => errors.push(e.error));
      own.device.destroy();
      await own.device.lost;
      await new Promise((r) => setTimeout(r, 10));
      expect(() => allocator.allocate(64)).to.throw(DeviceError, /device was lost/).with.property('message').that.does.not.include('..');
      let rejected: unknown;
      await allocator.readBytes(ptr).catch((e: unknown) => (rejected = e));
      expect(rejected).to.be.instanceOf(DeviceError);
      expect(errors).to.have.length(1);
      allocator.free(ptr);
      allocator.dispose();
    });
  });
});

describe('webgpu plugin', function () {
  this.timeout(60_000);
  it('composes a runtime whose webgpu tensors reshape by copy on the device', async function () {
    const context = await deviceOrSkip(this);
    await using rt = await createRuntime({ plugins: [webgpu({ device: context.device })] });
    const t = rt.tensor([4, 6], { dtype: 'float16', device: 'webgpu' });
    const values = new Uint16Array(24).map((_, i) => i);
    rt.write(t.storage, values);
    const transposed = t.asStrided([6, 4], [1, 6]);
    const copy = transposed.reshape([24]);
    expect(copy.storage).to.not.equal(t.storage);
    const got = new Uint16Array((await rt.read(copy.storage)).buffer);
    expect([...got.slice(0, 6)]).to.deep.equal([0, 6, 12, 18, 1, 7]);
    expect(rt.allocator('webgpu').memoryStats()['allocation.all.current']).to.equal(2);
  });

  it('runs the reclaimers registered in the runtime (IPC, then LMS) before OutOfMemoryError, and retries after one that freed', async function () {
    const context = await deviceOrSkip(this);
    const calls: string[] = [];
    const held: DataPtr[] = [];
    const ipc: MemoryReclaimer = { reclaim: () => (calls.push('ipc'), 0) };
    const lms: MemoryReclaimer = { reclaim: () => (calls.push('lms'), held.splice(0).reduce((n, p) => (p.release(), n + p.byteLength), 0)) };
    const reclaimers: Plugin = {
      name: 'fake reclaimers',
      register: (c) => {
        c.register(IpcCollector, { useValue: ipc });
        c.register(LmsReclaimer, { useValue: lms });
      },
    };
    await using rt = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '64MiB' }), reclaimers] });
    const allocator = rt.allocator('webgpu');
    const kept = allocator.allocate(40 << 20);
    expect(() => allocator.allocate(40 << 20)).to.throw(OutOfMemoryError, /budget is 64\.00 MiB/);
    expect(calls, 'nothing to reclaim: IPC, then LMS, then the error').to.deep.equal(['ipc', 'lms']);
    held.push(kept);
    calls.length = 0;
    expect(allocator.allocate(40 << 20).byteLength, 'served once LMS freed the held tensor').to.equal(40 << 20);
    expect(calls).to.deep.equal(['ipc', 'lms']);
  });

  it('refuses unknown option keys (naming the nearest), engine options WebGPU does not take and bad device option values, before opening a device', async () => {
    const bad: [unknown, RegExp][] = [
      [{ limt: '1GiB' }, /options\.limt.*did you mean limit\?/],
      [{ backend: ['vulkan'] }, /options\.backend.*did you mean backends\?/],
      [{ expandableSegments: true }, /options\.expandableSegments.*not an option here/],
      [{ unifiedPools: 'yes' }, /options\.unifiedPools must be true or false/],
      [{ backends: ['metal'] }, /options\.backends\[0\] must be one of "vulkan"/],
      [{ backends: 'vulkan' }, /options\.backends must be a non-empty list/],
      [{ device: {} }, /options\.device must be a GPUDevice/],
      [{ adapterOptions: 'high-performance' }, /options\.adapterOptions must be an options object/],
    ];
    for (const [options, pattern] of bad) {
      let error: unknown;
      try {
        webgpu(options as WebGpuOptions);
      } catch (e) {
        error = e;
      }
      expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
    for (const [options, pattern] of [
      [{ limit: '1GiB' }, /options\.limit.*not an option here/],
      [{ backends: ['metal'] }, /options\.backends\[0\]/],
      [null, /options must be an options object/],
    ] as const) {
      const error: unknown = await openWebGpuDevice(options as never).then(() => undefined, (e: unknown) => e);
      expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
  });

  it("refuses a reclaimers option: no option replaces the runtime's reclaimers", () => {
    const reclaimers = (): readonly MemoryReclaimer[] => [];
    expect(() => webgpu({ reclaimers } as WebGpuOptions)).to.throw(InvalidArgumentError, /runtime's reclaimers/);
  });

  it('passes engine options it does not own through to the engine, garbageCollectionThreshold among them', async function () {
    const context = await deviceOrSkip(this);
    await using rt = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '64MiB', garbageCollectionThreshold: 0.5 })] });
    const allocator = rt.allocator('webgpu') as WebGpuAllocator;
    expect(allocator.engine.options.garbageCollectionThreshold).to.equal(0.5);
    expect(allocator.engine.options.memoryLimit, 'limit is the engine budget').to.equal(64 << 20);
    expect(allocator.backend.capacityBytes, 'WebGPU reports no capacity').to.equal(undefined);
  });

  it('answers a device index it does not serve with the BackendUnavailableError every device plugin gives', async function () {
    const context = await deviceOrSkip(this);
    await using rt = await createRuntime({ plugins: [webgpu({ device: context.device })] });
    expect(() => rt.storage(8, { device: 'webgpu:1' })).to.throw(BackendUnavailableError, /^webgpu:1 does not exist: this runtime has one webgpu device, webgpu:0\. Use that one\.$/);
  });

  it('runs out of memory at the same point as the CPU allocator under the same limit and engine options', async function () {
    const context = await deviceOrSkip(this);
    const MiB = 1 << 20;
    // One budget, one meaning: the same requests reach the same out-of-memory point on both devices.
    const options = { limit: '24MiB', preset: 'pytorch', unifiedPools: true, garbageCollectionThreshold: 0.75, segmentSize: (rounded: number) => Math.ceil(rounded / (2 * MiB)) * 2 * MiB } as const;
    await using rt = await createRuntime({ plugins: [cpu(options), webgpu({ device: context.device, ...options })] });
    const outcome = (device: string) => {
      const allocator = rt.allocator(device);
      const sizes: number[] = [];
      for (let i = 0; ; i++) {
        const bytes = [1, 3, 5][i % 3]! * MiB;
        try {
          allocator.allocate(bytes);
        } catch (error) {
          expect(error, String(error)).to.be.instanceOf(OutOfMemoryError);
          return { served: sizes, failedAt: bytes, budgetBytes: (error as OutOfMemoryError).budgetBytes, reserved: allocator.memoryStats()['reserved_bytes.all.current'] };
        }
        sizes.push(bytes);
      }
    };
    const onCpu = outcome('cpu');
    const onWebGpu = outcome('webgpu');
    expect(onWebGpu).to.deep.equal(onCpu);
    expect(onCpu.budgetBytes).to.equal(24 * MiB);
    expect(onCpu.reserved).to.be.at.most(24 * MiB);
  });
});
