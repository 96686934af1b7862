import { expect } from 'chai';
import { createCpuAllocator, LimitingAllocator } from '@stowage/core';

describe('SafeEmitter#safeEmit (through an allocator)', () => {
  it('delivers an event to every listener when an earlier listener throws', () => {
    using allocator = createCpuAllocator();
    const seen: string[] = [];
    allocator.events.on('listenerFailed', () => seen.push('listenerFailed'));
    allocator.events.on('allocated', () => {
      throw new Error('listener bug');
    });
    allocator.events.on('allocated', () => seen.push('second listener'));
    allocator.free(allocator.allocate(64));
    expect(seen).to.include('second listener');
  });

  it("relays the upstream's allocated event to a LimitingAllocator's listeners when an earlier upstream listener throws", () => {
    const upstream = createCpuAllocator();
    upstream.events.on('listenerFailed', () => {});
    upstream.events.on('allocated', () => {
      throw new Error('listener bug');
    });
    const limiter = new LimitingAllocator(upstream, '1MiB');
    const seen: number[] = [];
    limiter.events.on('allocated', (e) => seen.push(e.requestedBytes));
    limiter.free(limiter.allocate(100));
    limiter.dispose();
    upstream.dispose();
    expect(seen).to.deep.equal([100]);
  });
});
