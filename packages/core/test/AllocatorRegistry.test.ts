import { expect } from 'chai';
import type { Allocator } from '@stowage/core';
import { createRuntime, DisposedError, wrapAllocators } from '@stowage/core';

describe('AllocatorRegistry#get', () => {
  it('disposes the allocator its factory made when a decorator throws', async () => {
    let made: Allocator | undefined;
    await using rt = await createRuntime({
      plugins: [
        wrapAllocators('cpu', (a) => (made = a)),
        wrapAllocators('cpu', () => {
          throw new Error('wrap failed');
        }),
      ],
    });
    expect(() => rt.allocator('cpu')).to.throw(/wrap failed/);
    expect(() => made!.allocate(8), 'the factory-made allocator leaks').to.throw(DisposedError);
  });
});
