import { expect } from 'chai';
import { BackendUnavailableError, ForeignPointerError, InvalidArgumentError } from '@stowage/core';
import { patternBytes } from '@stowage/core/testing';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { createCudaAllocator } from '@stowage/allocator-cuda';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

const MiB = 2 ** 20;

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a).equals(Buffer.from(b));
}

describe('CudaPager', function () {
  this.timeout(60_000);
  const lib = testLibcuda();
  if (typeof lib === 'string') {
    it('pages through a libcuda (skipped: none could be loaded or built)', function () {
      console.log(`    skipped: ${lib}`);
      this.skip();
    });
    return;
  }
  const make = (): CudaAllocator => createCudaAllocator({ libcuda: lib.path, expandableSegments: false });

  it('pages a block out to host memory and back, byte for byte', async () => {
    using allocator = make();
    const src = allocator.allocate(3 * MiB + 5);
    const pattern = patternBytes(src.byteLength, 7);
    allocator.writeBytes(src, pattern);
    const out = allocator.pager.pageOut(src);
    allocator.free(src);
    const bytes = await out.done;
    expect(out.bytes).to.equal(bytes);
    expect(equalBytes(bytes, pattern)).to.equal(true);
    const dst = allocator.allocate(src.byteLength);
    allocator.pager.pageIn(bytes, dst);
    expect(equalBytes(await allocator.readBytes(dst), pattern), 'work on the default stream after pageIn sees the bytes').to.equal(true);
    allocator.free(dst);
  });

  it('returns from pageOut before the copy has run, and keeps the block from reuse until it has', async function () {
    if (lib.hooks === null) {
      console.log('    skipped: needs the stand-in\'s delayStream hook; running on a real driver');
      this.skip();
    }
    using allocator = make();
    const s = allocator.createStream();
    const src = allocator.allocate(MiB, { stream: s });
    const pattern = patternBytes(MiB, 3);
    allocator.writeBytes(src, pattern);
    lib.hooks!.delayStream(allocator.streamOf(s)!, 100_000); // the program's work on s is still running
    const out = allocator.pager.pageOut(src);
    expect(out.bytes, 'bytes are not on the host when pageOut returns').to.equal(null);
    const address = src.address;
    allocator.free(src);
    const next = allocator.allocate(MiB, { stream: s });
    expect(next.address, 'the block is not handed out while the page-out may still read it').to.not.equal(address);
    allocator.writeBytes(next, new Uint8Array(MiB).fill(0xee));
    expect(equalBytes(await out.done, pattern)).to.equal(true);
    allocator.free(next);
  });

  it('pages on each device in that device\'s context, whichever device made the last call', async function () {
    using a0 = make();
    let a1: CudaAllocator;
    try {
      a1 = createCudaAllocator({ libcuda: lib.path, expandableSegments: false }, 1);
    } catch (error) {
      if (!(error instanceof BackendUnavailableError)) throw error;
      console.log('    skipped: the driver has one device');
      return this.skip();
    }
    using _a1 = a1;
    for (const seed of [8, 9]) {
      const p1 = a1.allocate(MiB);
      a1.writeBytes(p1, patternBytes(MiB, seed));
      const p0 = a0.allocate(MiB);
      a0.backend.enter(); // device 0's context is current now, as after any call of a0's
      const out = a1.pager.pageOut(p1);
      a1.free(p1);
      expect(equalBytes(await out.done, patternBytes(MiB, seed))).to.equal(true);
      a0.free(p0);
    }
  });

  it('refuses to page out a pointer its allocator does not own, queuing nothing', () => {
    using allocator = make();
    using other = make();
    const foreign = other.allocate(MiB);
    expect(() => allocator.pager.pageOut(foreign)).to.throw(ForeignPointerError);
    expect(allocator.pager.pinnedBytes, 'no staging buffer was taken').to.equal(0);
    other.free(foreign);
  });

  it('refuses to page out or in what is not a live pointer of its allocator, or bytes that are not a Uint8Array, with typed errors, queuing nothing', () => {
    using allocator = make();
    const ptr = allocator.allocate(MiB);
    for (const junk of [undefined, null, {}, 5]) {
      expect(() => allocator.pager.pageOut(junk as never), String(junk)).to.throw(InvalidArgumentError, /^ptr must be a DataPtr/);
      expect(() => allocator.pager.pageIn(new Uint8Array(8), junk as never), String(junk)).to.throw(InvalidArgumentError, /^dst must be a live DataPtr/);
    }
    expect(() => allocator.pager.pageIn([1, 2] as never, ptr)).to.throw(InvalidArgumentError, /^bytes must be a Uint8Array/);
    expect(() => allocator.pager.pageIn(new Uint8Array(2 * MiB), ptr), 'more bytes than dst holds').to.throw(InvalidArgumentError, /at least 2097152 bytes/);
    expect(allocator.pager.pinnedBytes, 'no staging buffer was taken').to.equal(0);
    allocator.free(ptr);
  });

  it('keeps pinned staging buffers in a pool: a second round of the same sizes allocates no more pinned memory', async () => {
    using allocator = make();
    const round = async (): Promise<void> => {
      const ptrs = [MiB, 2 * MiB, MiB].map((n) => allocator.allocate(n));
      const outs = ptrs.map((p) => allocator.pager.pageOut(p));
      for (const p of ptrs) allocator.free(p);
      await Promise.all(outs.map((o) => o.done));
    };
    await round();
    const pinned = allocator.pager.pinnedBytes;
    expect(pinned).to.be.greaterThan(0);
    await round();
    expect(allocator.pager.pinnedBytes).to.equal(pinned);
  });
});
