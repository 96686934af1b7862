import { expect } from 'chai';
import type { Allocator } from '@stowage/core';
import {
  createCpuAllocator,
  DisposedError,
  ForeignPointerError,
  InvalidArgumentError,
  LimitingAllocator,
  OutOfMemoryError,
  StatisticsAllocator,
} from '@stowage/core';
import { describeAllocatorContract } from '@stowage/core/testing';
import { expectRefusedOptions } from './refusedOptions.js';

const KiB = 1024;
const MiB = 1024 * KiB;

// The suite keeps at most ~60 live allocations of up to 3 MiB each; 1 GiB is far above that.
describeAllocatorContract('LimitingAllocator over the CPU allocator', () => new LimitingAllocator(createCpuAllocator(), '1GiB'));
describeAllocatorContract('StatisticsAllocator over a LimitingAllocator over the CPU allocator', () => new StatisticsAllocator(new LimitingAllocator(createCpuAllocator(), 1 << 30)));

/** Live allocations of the allocator at the bottom of the stack. */
const liveAt = (allocator: Allocator): number => allocator.memoryStats()['allocation.all.current'];

describe('LimitingAllocator#constructor', () => {
  it('refuses unknown option keys (naming the nearest) and option values of the wrong type with InvalidArgumentError', () => {
    expectRefusedOptions((options) => new LimitingAllocator(createCpuAllocator(), '1MiB', options));
  });

  it('takes the limit as a byte count or as text', () => {
    expect(new LimitingAllocator(createCpuAllocator(), 4096).limitBytes).to.equal(4096);
    expect(new LimitingAllocator(createCpuAllocator(), '1.5 MiB').limitBytes).to.equal(1.5 * MiB);
    expect(new LimitingAllocator(createCpuAllocator(), 0).limitBytes).to.equal(0);
  });

  it('rejects a limit that is not a byte count with InvalidArgumentError naming limitBytes', () => {
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 'lots', '', null, undefined, 10n]) {
      expect(() => new LimitingAllocator(createCpuAllocator(), bad as number))
        .to.throw(InvalidArgumentError)
        .with.property('argument', 'limitBytes');
    }
  });

  it('rejects an upstream that is not an allocator', () => {
    expect(() => new LimitingAllocator({} as Allocator, '1MiB'))
      .to.throw(InvalidArgumentError)
      .with.property('argument', 'upstream');
  });
});

describe('LimitingAllocator#allocate', () => {
  it('serves requests up to the limit exactly', () => {
    using allocator = new LimitingAllocator(createCpuAllocator(), MiB);
    const a = allocator.allocate(768 * KiB);
    const b = allocator.allocate(256 * KiB);
    expect(allocator.usedBytes).to.equal(MiB);
    expect(allocator.allocate(0).byteLength, 'a zero-byte request still fits').to.equal(0);
    allocator.free(a);
    allocator.free(b);
    expect(allocator.usedBytes).to.equal(0);
  });

  it('rejects a request past the budget with OutOfMemoryError without calling the upstream', () => {
    using allocator = new LimitingAllocator(createCpuAllocator(), MiB);
    const keep = allocator.allocate(768 * KiB);
    const upstreamCalls: number[] = [];
    allocator.upstream.events.on('allocated', (e) => upstreamCalls.push(e.requestedBytes));
    const reported: number[] = [];
    allocator.events.on('outOfMemory', (e) => reported.push(e.requestedBytes));

    const error = (() => {
      try {
        allocator.allocate(512 * KiB);
      } catch (e) {
        return e;
      }
      return undefined;
    })();

    expect(error).to.be.instanceOf(OutOfMemoryError);
    const oom = error as OutOfMemoryError;
    expect(oom.requestedBytes).to.equal(512 * KiB);
    expect(oom.capacityBytes).to.equal(MiB);
    expect(oom.stats.num_ooms).to.equal(1);
    expect(oom.message).to.contain('tried to allocate 512.00 KiB').and.contain("the allocator's budget is 1.00 MiB, of which 256.00 KiB is free");
    expect(oom.budgetBytes).to.equal(MiB);
    expect(upstreamCalls, 'upstream allocations').to.deep.equal([]);
    expect(allocator.upstream.memoryStats().num_ooms, "the upstream's own num_ooms").to.equal(0);
    expect(allocator.memoryStats().num_ooms).to.equal(1);
    expect(reported).to.deep.equal([512 * KiB]);
    expect(allocator.usedBytes).to.equal(768 * KiB);
    expect(liveAt(allocator)).to.equal(1);
    allocator.free(keep);
  });

  it('gives the bytes back when the upstream runs out within the budget', () => {
    using allocator = new LimitingAllocator(createCpuAllocator({ limit: '1MiB' }), '1GiB');
    const reported: number[] = [];
    allocator.events.on('outOfMemory', (e) => reported.push(e.requestedBytes));
    expect(() => allocator.allocate(2 * MiB)).to.throw(OutOfMemoryError).with.property('capacityBytes', MiB);
    expect(allocator.usedBytes).to.equal(0);
    expect(reported, "the upstream's outOfMemory, relayed").to.deep.equal([2 * MiB]);
    expect(allocator.memoryStats().num_ooms).to.equal(1);
  });

  it('rejects a size that is not a byte count before looking at the budget', () => {
    using allocator = new LimitingAllocator(createCpuAllocator(), 16);
    expect(() => allocator.allocate(2 ** 53)).to.throw(InvalidArgumentError).with.property('argument', 'nbytes');
    expect(allocator.memoryStats().num_ooms).to.equal(0);
  });

  it('throws DisposedError after dispose, even for a request past the budget', () => {
    const allocator = new LimitingAllocator(createCpuAllocator(), 16);
    allocator.dispose();
    expect(() => allocator.allocate(32)).to.throw(DisposedError);
    expect(() => allocator.allocate(8)).to.throw(DisposedError);
  });
});

describe('LimitingAllocator#usedBytes', () => {
  it('frees budget when a pointer is released through ptr.release() as well as free()', () => {
    using allocator = new LimitingAllocator(createCpuAllocator(), MiB);
    const a = allocator.allocate(MiB);
    expect(() => allocator.allocate(1)).to.throw(OutOfMemoryError);
    a.release();
    expect(allocator.usedBytes).to.equal(0);
    using b = allocator.allocate(MiB);
    expect(b.byteLength).to.equal(MiB);
  });

  it('frees budget once when a pointer is released through an adaptor stacked on top', () => {
    using stack = new StatisticsAllocator(new LimitingAllocator(createCpuAllocator(), MiB));
    const limiter = stack.upstream as LimitingAllocator;
    const ptr = stack.allocate(600 * KiB);
    expect(limiter.usedBytes).to.equal(600 * KiB);
    expect(() => limiter.free(ptr), 'the limiter no longer owns a pointer the adaptor above adopted').to.throw(ForeignPointerError);
    stack.free(ptr);
    expect(limiter.usedBytes).to.equal(0);
    expect(liveAt(stack)).to.equal(0);
  });

  it('returns the bytes of a pointer released after the adaptor was disposed', () => {
    const allocator = new LimitingAllocator(createCpuAllocator(), MiB);
    const ptr = allocator.allocate(1000);
    allocator.dispose();
    ptr.release();
    expect(allocator.usedBytes).to.equal(0);
  });
});

describe('LimitingAllocator#events', () => {
  it('relays the upstream events and stops relaying after dispose', () => {
    const upstream = createCpuAllocator();
    const allocator = new LimitingAllocator(upstream, MiB, { ownsUpstream: false });
    const seen: string[] = [];
    allocator.events.on('allocated', (e) => seen.push(`allocated ${e.requestedBytes}`));
    allocator.events.on('freed', (e) => seen.push(`freed ${e.ptr.byteLength}`));
    allocator.free(allocator.allocate(10));
    allocator.dispose();
    upstream.free(upstream.allocate(20));
    expect(seen).to.deep.equal(['allocated 10', 'freed 10']);
    upstream.dispose();
  });
});
