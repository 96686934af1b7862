import { expect } from 'chai';
import { createCpuAllocator, CpuMemoryBackend, DataPtr, DeviceMismatchError, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { describeAllocatorContract } from '@stowage/core/testing';
import { thrownBy } from './engine/helpers.js';

describeAllocatorContract('CPU allocator (ArrayBuffer)', () => createCpuAllocator());
describeAllocatorContract('CPU allocator (SharedArrayBuffer)', () => createCpuAllocator({ shared: true }));

describe('createCpuAllocator', () => {
  it('backs allocations with ArrayBuffer by default and SharedArrayBuffer when asked', () => {
    using allocator = createCpuAllocator();
    using plain = allocator.allocate(16);
    using shared = allocator.allocate(16, { shared: true });
    expect(plain.handle).to.be.instanceOf(ArrayBuffer);
    expect(shared.handle).to.be.instanceOf(SharedArrayBuffer);
    using sharedByDefault = createCpuAllocator({ shared: true });
    expect(sharedByDefault.allocate(8).handle).to.be.instanceOf(SharedArrayBuffer);
  });

  it('enforces a limit with an OutOfMemoryError that names the budget', () => {
    using allocator = createCpuAllocator({ limit: '64MiB' });
    const a = allocator.allocate(40 << 20);
    let error: unknown;
    try {
      allocator.allocate(30 << 20);
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).message).to.contain('tried to allocate 30.00 MiB').and.contain("the allocator's budget is 64.00 MiB");
    expect((error as OutOfMemoryError).budgetBytes).to.equal(64 << 20);
    expect((error as OutOfMemoryError).capacityBytes).to.equal(64 << 20);
    allocator.free(a);
    expect(allocator.allocate(30 << 20).byteLength).to.equal(30 << 20);
  });

  it('rejects a limit that is not a byte count', () => {
    expect(() => createCpuAllocator({ limit: 'lots' })).to.throw(InvalidArgumentError, /limit must be a byte count/);
  });

  it('keeps freed blocks cached, and detaches a segment it returns so that a stale view sees no bytes', () => {
    using allocator = createCpuAllocator();
    const ptr = allocator.allocate(4 << 20);
    const view = hostBytes(ptr);
    view.fill(7);
    allocator.free(ptr);
    expect(view.byteLength, 'cached, not returned').to.equal(4 << 20);
    allocator.emptyCache();
    expect(view.byteLength).to.equal(0);
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
  });

  it('rejects null options with InvalidArgumentError, not a TypeError', () => {
    const error = thrownBy(() => createCpuAllocator(null as never));
    expect(error).to.be.instanceOf(InvalidArgumentError);
  });

  it('refuses a usage host memory cannot serve, and a shared flag that is not a boolean, changing nothing', () => {
    using allocator = createCpuAllocator();
    for (const [options, pattern] of [
      [{ usage: 'uniform' }, /options\.usage must be 'storage'/],
      [{ shared: 'no' }, /options\.shared must be true or false/],
    ] as const) {
      const error = thrownBy(() => allocator.allocate(1024, options as never));
      expect(error, String(error)).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
      expect(allocator.memoryStats()['allocated_bytes.all.current']).to.equal(0);
      allocator.assertInvariants();
    }
    using plain = allocator.allocate(1024, { usage: 'storage', shared: false });
    expect(plain.handle).to.be.instanceOf(ArrayBuffer);
  });
});

describe('CpuMemoryBackend#constructor', () => {
  it('refuses a shared option given as anything but a boolean, and unknown keys, with InvalidArgumentError', () => {
    for (const [options, pattern] of [
      [{ shared: 'no' }, /options\.shared must be true or false/],
      [{ capacity: 1024 }, /options\.capacity.*did you mean capacityBytes\?/],
    ] as const) {
      const error = thrownBy(() => new CpuMemoryBackend(options as never));
      expect(error, String(error)).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
  });

  it('rejects a capacityBytes that is not a byte count instead of treating NaN as unlimited', () => {
    const error = thrownBy(() => {
      const backend = new CpuMemoryBackend({ capacityBytes: Number.NaN });
      expect(backend.malloc(1 << 20), 'a 1 MiB segment under a NaN budget').to.equal(null);
    });
    expect(error).to.be.instanceOf(InvalidArgumentError);
  });
});

describe('CpuMemoryBackend#malloc', () => {
  it('hands out aligned, never-reused virtual addresses and tracks reserved bytes', () => {
    const backend = new CpuMemoryBackend();
    const a = backend.malloc(100)!;
    const b = backend.malloc(0)!;
    const c = backend.malloc(64)!;
    expect(a.address % backend.alignment).to.equal(0);
    expect(b.address).to.be.at.least(a.address + 100);
    expect(c.address).to.be.greaterThan(b.address);
    expect(backend.reservedBytes).to.equal(164);
    backend.free(a);
    expect(backend.reservedBytes).to.equal(64);
    expect(backend.malloc(100)!.address).to.be.greaterThan(c.address);
  });

  it('returns null rather than throwing when V8 cannot allocate', () => {
    expect(new CpuMemoryBackend().malloc(Number.MAX_SAFE_INTEGER)).to.equal(null);
    expect(new CpuMemoryBackend({ capacityBytes: 10 }).malloc(11)).to.equal(null);
  });
});

describe('CPU allocator#copyData', () => {
  it('rejects a pointer from another device with DeviceMismatchError, changing nothing', async () => {
    using allocator = createCpuAllocator();
    const mine = allocator.allocate(8);
    allocator.writeBytes(mine, new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]));
    const gpu = new DataPtr({ device: { type: 'cuda', index: 0 }, byteLength: 8, handle: 0x7000n, byteOffset: 0, address: 0x7000, context: null, deleter: null });
    expect(() => allocator.copyData(mine, gpu, 8)).to.throw(DeviceMismatchError, /^src lives on cuda:0, but this allocator serves cpu:0/);
    expect(() => allocator.copyData(gpu, mine, 8)).to.throw(DeviceMismatchError, /^dst/);
    expect(() => allocator.free(gpu)).to.throw(DeviceMismatchError);
    expect([...(await allocator.readBytes(mine))]).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8]);
  });
});
