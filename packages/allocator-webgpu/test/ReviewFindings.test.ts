import { expect } from 'chai';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { allocatorOn, deviceOrSkip } from './testDevice.js';

describe('WebGpuAllocator (review findings)', function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  before(async function () {
    context = await deviceOrSkip(this);
  });

  it('writes an unaligned run of more than 16 MiB completely (the byte-copy kernel stays within the dispatch limit)', async () => {
    using allocator = allocatorOn(context);
    const n = (16 << 20) + 1; // odd length: the byte-copy kernel path, first chunk at its maximum
    const ptr = allocator.allocate(n);
    const bytes = new Uint8Array(n);
    for (let i = 0; i < n; i++) bytes[i] = (i * 7 + 3) & 0xff;
    context.device.pushErrorScope('validation');
    allocator.writeBytes(ptr, bytes);
    const error = await context.device.popErrorScope();
    expect(error?.message, 'the dispatch was valid').to.equal(undefined);
    const back = await allocator.readBytes(ptr);
    let firstBad = -1;
    for (let i = 0; i < n && firstBad < 0; i++) if (back[i] !== bytes[i]) firstBad = i;
    expect(firstBad, 'first byte that differs').to.equal(-1);
  });

  it('reuses a block freed since the last submit instead of reporting out of memory at the limit', () => {
    using allocator = allocatorOn(context, { limit: '64MiB' });
    // Under a 64 MiB budget segments start at 8 MiB (Note [WebGPU segment sizing]); larger requests get their own.
    const a = allocator.allocate(2 << 20);
    allocator.allocate(2 << 20);
    allocator.allocate(4 << 20); // the 8 MiB segment is full, and split
    allocator.allocate(56 << 20); // a segment of its own: the budget is spent
    allocator.free(a); // waits for the next submit (Note [Submit epochs])
    const again = allocator.allocate(2 << 20);
    expect(again.handle).to.equal(a.handle);
    allocator.engine.assertInvariants();
  });
});
