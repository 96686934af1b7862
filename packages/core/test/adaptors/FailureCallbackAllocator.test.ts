import { expect } from 'chai';
import type { DataPtr } from '@stowage/core';
import type { AllocationFailure } from '@stowage/core/plugin-kit';
import { createCpuAllocator, FailureCallbackAllocator, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { describeAllocatorContract } from '@stowage/core/testing';
import { expectRefusedOptions } from './refusedOptions.js';

const KiB = 1024;
const MiB = 1024 * KiB;

describeAllocatorContract('FailureCallbackAllocator over the CPU allocator', () => new FailureCallbackAllocator(createCpuAllocator(), () => false));

/** What the callback was told, without the error object. */
const summary = (f: AllocationFailure): [number, number] => [f.requestedBytes, f.attempt];

describe('FailureCallbackAllocator#constructor', () => {
  it('refuses unknown option keys (naming the nearest) and option values of the wrong type with InvalidArgumentError', () => {
    expectRefusedOptions((options) => new FailureCallbackAllocator(createCpuAllocator(), () => false, options));
  });

  it('rejects a callback that is not a function and an upstream that is not an allocator', () => {
    expect(() => new FailureCallbackAllocator(createCpuAllocator(), true as never)).to.throw(InvalidArgumentError).with.property('argument', 'callback');
    expect(() => new FailureCallbackAllocator({ allocate: 1 } as never, () => false)).to.throw(InvalidArgumentError).with.property('argument', 'upstream');
  });
});

describe('FailureCallbackAllocator#allocate', () => {
  it('does not call the callback when the upstream succeeds', () => {
    const calls: AllocationFailure[] = [];
    using allocator = new FailureCallbackAllocator(createCpuAllocator(), (f) => calls.push(f) < 0);
    allocator.free(allocator.allocate(100));
    expect(calls).to.deep.equal([]);
  });

  it('retries after the callback frees memory and returns true', () => {
    const calls: AllocationFailure[] = [];
    let hog: DataPtr | undefined;
    // The caching engine reserves a 30 MiB segment for the hog and would need 20 MiB more for the request.
    using allocator = new FailureCallbackAllocator(createCpuAllocator({ limit: '40MiB' }), (failure) => {
      calls.push(failure);
      hog?.release();
      hog = undefined;
      return true;
    });
    hog = allocator.allocate(30 * MiB);

    const ptr = allocator.allocate(20 * MiB);

    expect(ptr.byteLength).to.equal(20 * MiB);
    expect(calls.map(summary)).to.deep.equal([[20 * MiB, 1]]);
    expect(calls[0]!.error).to.be.instanceOf(OutOfMemoryError);
    expect(calls[0]!.error.capacityBytes).to.equal(40 * MiB);
    allocator.free(ptr);
  });

  it('gives up and rethrows the last OutOfMemoryError when the callback returns false', () => {
    const calls: AllocationFailure[] = [];
    using allocator = new FailureCallbackAllocator(createCpuAllocator({ limit: '40MiB' }), (f) => {
      calls.push(f);
      return false;
    });
    using _hog = allocator.allocate(30 * MiB);
    let thrown: unknown;
    try {
      allocator.allocate(20 * MiB);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).to.be.instanceOf(OutOfMemoryError);
    expect(calls.map(summary)).to.deep.equal([[20 * MiB, 1]]);
    expect(thrown).to.equal(calls[0]!.error);
  });

  it('numbers the attempts and stops when the callback says so', () => {
    const calls: AllocationFailure[] = [];
    using allocator = new FailureCallbackAllocator(createCpuAllocator({ limit: '1MiB' }), (f) => {
      calls.push(f);
      return f.attempt < 3;
    });
    let thrown: unknown;
    try {
      allocator.allocate(2 << 20);
    } catch (error) {
      thrown = error;
    }
    expect(calls.map(summary)).to.deep.equal([
      [2 << 20, 1],
      [2 << 20, 2],
      [2 << 20, 3],
    ]);
    expect(thrown, 'the error of the last attempt').to.equal(calls[2]!.error);
    expect(allocator.memoryStats().num_ooms, 'the upstream counts every failed attempt').to.equal(3);
  });

  it('propagates an error other than OutOfMemoryError at once, without calling the callback', () => {
    let called = false;
    using allocator = new FailureCallbackAllocator(createCpuAllocator(), () => (called = true));
    expect(() => allocator.allocate(-1)).to.throw(InvalidArgumentError);
    expect(called).to.equal(false);
  });

  it('propagates an error the callback throws, without retrying', () => {
    let calls = 0;
    using allocator = new FailureCallbackAllocator(createCpuAllocator({ limit: '1KiB' }), () => {
      calls++;
      throw new Error('reclaim failed');
    });
    expect(() => allocator.allocate(4096)).to.throw('reclaim failed');
    expect(calls).to.equal(1);
  });
});
