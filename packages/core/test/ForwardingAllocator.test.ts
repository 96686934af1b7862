import { expect } from 'chai';
import { CachingAllocator, CpuMemoryBackend, createCpuAllocator, DisposedError, ForwardingAllocator, InvalidArgumentError, LimitingAllocator, StatisticsAllocator, TrackingAllocator } from '@stowage/core';
import { makeDirectAllocator } from '@stowage/core/plugin-kit';
import { VirtualMemoryBackend } from '@stowage/core/testing';

const KiB = 1024;

describe('ForwardingAllocator#recordStream', () => {
  it('forwards to the engine through adaptors that adopt their pointers, so a block used on another stream waits for it', () => {
    const backend = new VirtualMemoryBackend({ storeData: false, streams: 2 });
    const engine = new CachingAllocator(backend, { preset: 'pytorch' });
    using stack = new StatisticsAllocator(new LimitingAllocator(engine, '1GiB'));
    const a = stack.allocate(4 * KiB);
    stack.recordStream(a, 1);
    backend.holdStream(1);
    stack.free(a);
    expect(stack.allocate(4 * KiB).address, 'the block waits for stream 1').to.not.equal(a.address);
    backend.completeStream(1);
    expect(stack.allocate(4 * KiB).address, 'reused once stream 1 is done').to.equal(a.address);
    expect(stack.memoryStats()['allocation.all.current']).to.equal(2);
    engine.assertInvariants();
  });

  it('does nothing over an allocator without streams (no recordStream), and refuses after dispose', () => {
    const upstream = makeDirectAllocator(new CpuMemoryBackend());
    expect(upstream.recordStream).to.equal(undefined);
    const adaptor = new ForwardingAllocator(upstream);
    const ptr = adaptor.allocate(64);
    expect(() => adaptor.recordStream(ptr, 0)).to.not.throw();
    adaptor.dispose();
    expect(() => adaptor.recordStream(ptr, 0)).to.throw(DisposedError);
  });
});

describe('ForwardingAllocator constructor', () => {
  it('refuses a missing upstream at construction, not at the first allocate', () => {
    expect(() => new ForwardingAllocator(null as never)).to.throw(InvalidArgumentError, /^upstream must be an Allocator/);
  });

  it('refuses null options and a non-boolean ownsUpstream', () => {
    const upstream = makeDirectAllocator(new CpuMemoryBackend());
    expect(() => new ForwardingAllocator(upstream, null as never)).to.throw(InvalidArgumentError, /^options must be/);
    expect(() => new ForwardingAllocator(upstream, { ownsUpstream: 'no' as never })).to.throw(InvalidArgumentError, /^options.ownsUpstream must be true or false/);
    upstream.dispose();
  });
});

describe('ForwardingAllocator#owns', () => {
  it('answers false for anything that is not a DataPtr, through every adaptor, rather than throwing', () => {
    using upstream = createCpuAllocator();
    using adaptor = new TrackingAllocator(new StatisticsAllocator(upstream));
    const ptr = adaptor.allocate(64);
    for (const junk of [null, undefined, 3, 'ptr', {}, { deleter: null }]) {
      expect(adaptor.owns(junk as never), String(junk)).to.equal(false);
      expect(upstream.owns(junk as never), String(junk)).to.equal(false);
    }
    expect(adaptor.owns(ptr)).to.equal(true);
    ptr.release();
  });
});
