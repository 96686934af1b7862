import { expect } from 'chai';
import { CpuMemoryBackend, DisposedError } from '@stowage/core';
import { makeDirectAllocator } from '@stowage/core/plugin-kit';
import { thrownBy } from './engine/helpers.js';

describe('AllocatorBase#memoryStats', () => {
  it('throws DisposedError after dispose, as the Allocator contract says of every method but dispose', () => {
    const allocator = makeDirectAllocator(new CpuMemoryBackend());
    allocator.allocate(64);
    allocator.dispose();
    // dispose() freed the 64 bytes; stats read now would still say they are allocated.
    expect(thrownBy(() => allocator.memoryStats())).to.be.instanceOf(DisposedError);
  });
});
