import { expect } from 'chai';
import { DataPtr, DoubleFreeError } from '@stowage/core';

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
