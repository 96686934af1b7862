import { expect } from 'chai';
import { createRuntime, OutOfMemoryError, StowageError } from '@stowage/core';
import { assertAllocatorInvariants, describeAllocatorContract } from '@stowage/core/testing';
import { arena, createArenaAllocator } from '@stowage/example-arena-allocator';

/** What `fn` threw, or undefined. */
function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

describeAllocatorContract('arena allocator (example third-party allocator)', () => createArenaAllocator({ capacity: '64MiB' }));

describe('createArenaAllocator', () => {
  it('coalesces a freed block with both neighbours back into one free range', () => {
    using allocator = createArenaAllocator({ capacity: 4096, alignment: 256 });
    const [a, b, c] = [256, 512, 256].map((n) => allocator.allocate(n));
    expect(allocator.arena.freeRanges()).to.deep.equal([[1024, 3072]]);
    allocator.free(a!);
    allocator.free(c!);
    expect(allocator.arena.freeRanges()).to.deep.equal([[0, 256], [768, 3328]]);
    allocator.free(b!);
    expect(allocator.arena.freeRanges()).to.deep.equal([[0, 4096]]);
    assertAllocatorInvariants(allocator, []);
  });

  it('reports the whole arena as reserved and runs out at its capacity', () => {
    using allocator = createArenaAllocator({ capacity: '1MiB' });
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(1 << 20);
    const ptr = allocator.allocate(1 << 19);
    expect(() => allocator.allocate((1 << 19) + 1)).to.throw(OutOfMemoryError, /1\.00 MiB total capacity/);
    allocator.free(ptr);
    expect(allocator.allocate(1 << 20).byteLength).to.equal(1 << 20);
  });

  it('snapshots one segment whose blocks tile the arena', () => {
    using allocator = createArenaAllocator({ capacity: 8192 });
    allocator.allocate(100);
    const [segment] = allocator.snapshot().segments;
    expect(segment!.blocks.map((b) => [b.size, b.state])).to.deep.equal([
      [256, 'active_allocated'],
      [7936, 'inactive'],
    ]);
    expect(segment!.requested_size).to.equal(100);
  });

  it('aligns addresses to an alignment above 1 MiB', () => {
    using allocator = createArenaAllocator({ capacity: '16MiB', alignment: 2 << 20 });
    const ptr = allocator.allocate(1);
    expect(ptr.address % allocator.alignment).to.equal(0);
    allocator.free(ptr);
  });

  it('rejects a capacity the host cannot allocate with a typed error', () => {
    const error = thrownBy(() => createArenaAllocator({ capacity: '1PiB' }));
    expect(error).to.be.instanceOf(StowageError);
  });
});

describe('arena plugin', () => {
  it('serves the arena device in a runtime, next to the CPU', async () => {
    await using rt = await createRuntime({ plugins: [arena({ capacity: '1MiB' })] });
    expect(rt.deviceTypes).to.deep.equal(['arena', 'cpu']);
    const s = rt.storage(5, { device: 'arena' });
    rt.write(s, new Uint8Array([1, 2, 3, 4, 5]));
    expect([...(await rt.read(s))]).to.deep.equal([1, 2, 3, 4, 5]);
    const t = rt.tensor([4, 4], { device: 'arena:1' });
    expect(t.reshape([16]).storage).to.equal(t.storage);
    expect(rt.allocator('arena:1')).to.not.equal(rt.allocator('arena:0'));
  });
});
