import { expect } from 'chai';
import { createCpuAllocator, DataPtr, DoubleFreeError, InvalidArgumentError, StorageImpl } from '@stowage/core';

const init = (deleter: ((c: unknown) => void) | null, context: unknown = 'ctx') => ({
  device: { type: 'cpu', index: 0 },
  byteLength: 8,
  handle: new ArrayBuffer(8),
  byteOffset: 0,
  address: 4096,
  context,
  deleter,
});

describe('DataPtr#release', () => {
  it('calls the deleter once with the context and then rejects a second release', () => {
    const calls: unknown[] = [];
    const ptr = new DataPtr(init((c) => calls.push(c)));
    ptr.release();
    expect(calls).to.deep.equal(['ctx']);
    expect(ptr.isReleased).to.equal(true);
    expect(() => ptr.release()).to.throw(DoubleFreeError, /already released/);
    expect(calls).to.have.length(1);
  });

  it('releases at the end of a using scope unless already released', () => {
    let calls = 0;
    {
      using _ptr = new DataPtr(init(() => calls++));
    }
    expect(calls).to.equal(1);
  });
});

describe('DataPtr#compareExchangeDeleter', () => {
  it('swaps deleter and context only when the expected deleter is current', () => {
    const original = (): void => {};
    const calls: unknown[] = [];
    const next = (c: unknown): void => void calls.push(c);
    const ptr = new DataPtr(init(original));
    expect(ptr.compareExchangeDeleter(next, next, 'x')).to.equal(false);
    expect(ptr.compareExchangeDeleter(original, next, 'wrapped')).to.equal(true);
    expect(ptr.context).to.equal('wrapped');
    ptr.release();
    expect(calls).to.deep.equal(['wrapped']);
    expect(ptr.compareExchangeDeleter(null, original, 'late')).to.equal(false);
  });
});

describe('DataPtr#release (a pointer a live storage holds)', () => {
  it('refuses to release a pointer a live storage holds, changing nothing; the storage releases it', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(8), allocator });
    const ptr = storage.data();
    expect(() => ptr.release()).to.throw(InvalidArgumentError, /belongs to a live storage/);
    expect(ptr.isReleased).to.equal(false);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(1);
    storage.release();
    expect(ptr.isReleased).to.equal(true);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
  });
});
