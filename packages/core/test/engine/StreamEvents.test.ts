import { expect } from 'chai';
import { engine, MiB } from './helpers.js';

describe('CachingAllocator#allocate (out-of-memory chain with blocks waiting on stream events)', () => {
  it('serves a request from a block that the release of the cache freed, before reporting out of memory', () => {
    const { allocator, backend } = engine({ preset: 'pytorch' }, { streams: 2, capacityBytes: 2 * MiB });
    const a = allocator.allocate(MiB);
    allocator.allocate(MiB); // keeps the segment split, so it cannot be released
    allocator.recordStream(a, 1);
    backend.holdStream(1);
    allocator.free(a); // waits for stream 1
    // The out-of-memory chain synchronizes stream 1: a's block is then free and fits.
    const again = allocator.allocate(MiB);
    expect(again.address).to.equal(a.address);
    allocator.assertInvariants();
  });
});
