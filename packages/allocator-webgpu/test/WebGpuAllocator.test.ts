import { expect } from 'chai';
import type { DataPtr, DeviceError as DeviceErrorType, MemoryReclaimer, Plugin } from '@stowage/core';
import {
  BackendUnavailableError,
  cpu,
  createCpuAllocator,
  createRuntime,
  IpcCollector,
  LmsReclaimer,
  DeviceError,
  makeDirectAllocator,
  DeviceMismatchError,
  InvalidArgumentError,
  OutOfMemoryError,
  UseAfterReleaseError,
} from '@stowage/core';
import { patternBytes } from '@stowage/core/testing';
import type { WebGpuAllocator, WebGpuContext, WebGpuOptions } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, fromGpuBuffer, webgpu, WebGpuMemoryBackend } from '@stowage/allocator-webgpu';
import { allocatorOn, COPY_DST, COPY_SRC, deviceOrSkip, ownDeviceOrSkip, readBuffer, STORAGE } from './testDevice.js';


describe('WebGpuAllocator', function () {
  this.timeout(60_000);
  let context: WebGpuContext;
  before(async function () {
    context = await deviceOrSkip(this);
  });

  describe('#allocate', () => {
    it('carves tensors out of one GPUBuffer segment at binding-aligned offsets', () => {
      using allocator = allocatorOn(context);
      const a = allocator.allocate(1000);
      const b = allocator.allocate(3000);
      expect(a.handle).to.equal(b.handle);
      expect((a.handle as GPUBuffer).size, 'Note [WebGPU segment sizing]: 48 MiB segments at first').to.equal(48 << 20);
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
      const before = allocator.memoryStats();
      expect(() => allocator.allocate(256, { usage: 'vertex' })).to.throw(InvalidArgumentError, /options.usage/);
      expect(() => allocator.allocate(256, { usage: 'readback' })).to.throw(InvalidArgumentError, /Runtime#read/);
      expect(allocator.memoryStats()).to.deep.equal(before);
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
  });

  describe('pager', () => {
    it('pages a block out to host memory and back in', async () => {
      using allocator = allocatorOn(context);
      const ptr = allocator.allocate(1000);
      const data = patternBytes(1000, 3);
      allocator.writeBytes(ptr, data);
      const paged = await allocator.pager.pageOut(ptr);
      allocator.writeBytes(ptr, new Uint8Array(1000));
      await allocator.pager.pageIn(paged, ptr);
      expect([...(await allocator.readBytes(ptr))]).to.deep.equal([...data]);
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

    it('refuses allocations with a DeviceError after the device is lost, and nothing hangs', async function () {
      const own = await ownDeviceOrSkip(this);
      const allocator = createWebGpuAllocator(own!, { limit: '64MiB' });
      const ptr = allocator.allocate(64);
      const errors: DeviceErrorType[] = [];
      allocator.events.on('deviceError', (e) => errors.push(e.error));
      own.device.destroy();
      await own.device.lost;
      await new Promise((r) => setTimeout(r, 10));
      expect(() => allocator.allocate(64)).to.throw(DeviceError, /device was lost/);
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
