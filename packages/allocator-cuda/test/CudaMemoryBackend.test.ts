import { expect } from 'chai';
import { patternBytes } from '@stowage/core/testing';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { createCudaAllocator } from '@stowage/allocator-cuda';
import type { TestLibcuda } from '@stowage/allocator-cuda/testing';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

const MiB = 2 ** 20;

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a).equals(Buffer.from(b));
}

/** Skips a test that needs the stand-in's hooks on a real driver. */
function needHooks(ctx: Mocha.Context, lib: TestLibcuda): NonNullable<TestLibcuda['hooks']> {
  if (lib.hooks === null) {
    console.log("    skipped: needs the stand-in libcuda's test hooks; running on a real driver");
    ctx.skip();
  }
  return lib.hooks!;
}

describe('CudaMemoryBackend#read', function () {
  this.timeout(60_000);
  const library = testLibcuda();
  if (typeof library === 'string') {
    it('reads through a libcuda (skipped: none could be loaded or built)', function () {
      console.log(`    skipped: ${library}`);
      this.skip();
    });
    return;
  }
  const lib = library;
  const make = (): CudaAllocator => createCudaAllocator({ libcuda: lib.path, expandableSegments: false });

  /** Holds back the stream the backend reads on by `microseconds` (its next operations wait). */
  function delayReads(allocator: CudaAllocator, hooks: NonNullable<TestLibcuda['hooks']>, microseconds: number): void {
    const backend = allocator.backend;
    backend.enter();
    hooks.delayStream(backend.streams.handle(backend.readCopies.stream)!, microseconds);
  }

  it('keeps the JavaScript thread running while the copy is held back on its stream, then resolves with the bytes', async function () {
    const hooks = needHooks(this, lib);
    using allocator = make();
    const ptr = allocator.allocate(3 * MiB + 5);
    const pattern = patternBytes(ptr.byteLength, 11);
    allocator.writeBytes(ptr, pattern);
    delayReads(allocator, hooks, 200_000);
    const start = performance.now();
    let settled = false;
    const pending = allocator.readBytes(ptr).then((bytes) => {
      settled = true;
      return bytes;
    });
    const returnedAfterMs = performance.now() - start;
    let immediates = 0;
    await new Promise<void>((resolve) => {
      const tick = (): void => {
        immediates++;
        if (performance.now() - start < 50) setImmediate(tick);
        else resolve();
      };
      setImmediate(tick);
    });
    expect(returnedAfterMs, 'readBytes returned before the copy ran').to.be.below(100);
    expect(immediates, 'setImmediate callbacks ran while the read was pending').to.be.greaterThan(1);
    expect(settled, 'the read is still pending behind the delayed stream').to.equal(false);
    expect(equalBytes(await pending, pattern)).to.equal(true);
    expect(performance.now() - start, 'the read waited for the stream').to.be.at.least(150);
    allocator.free(ptr);
  });

  it('reads what the default stream wrote before it, not what it writes after (the write waits for the read)', async function () {
    const hooks = needHooks(this, lib);
    using allocator = make();
    const ptr = allocator.allocate(MiB);
    const before = patternBytes(MiB, 1);
    const after = patternBytes(MiB, 2);
    allocator.writeBytes(ptr, before);
    delayReads(allocator, hooks, 50_000);
    const pending = allocator.readBytes(ptr);
    allocator.writeBytes(ptr, after);
    expect(equalBytes(await pending, before)).to.equal(true);
    expect(equalBytes(await allocator.readBytes(ptr), after)).to.equal(true);
    allocator.free(ptr);
  });

  it('reads a range at an offset, several reads in flight at once, each with its own bytes', async () => {
    using allocator = make();
    const ptrs = [MiB, 2 * MiB + 3, 4096].map((n, i) => {
      const ptr = allocator.allocate(n);
      allocator.writeBytes(ptr, patternBytes(n, i));
      return ptr;
    });
    const reads = ptrs.map((ptr) => allocator.readBytes(ptr, 100, ptr.byteLength - 200));
    const bytes = await Promise.all(reads);
    for (const [i, ptr] of ptrs.entries()) {
      expect(equalBytes(bytes[i]!, patternBytes(ptr.byteLength, i).subarray(100, ptr.byteLength - 100))).to.equal(true);
      allocator.free(ptr);
    }
  });

  it('resolves a read still in flight when the allocator is disposed, and leaves no event or pinned buffer behind', async function () {
    const hooks = needHooks(this, lib);
    const eventsBefore = hooks.liveEvents();
    const allocator = make();
    const ptr = allocator.allocate(MiB);
    const pattern = patternBytes(MiB, 5);
    allocator.writeBytes(ptr, pattern);
    delayReads(allocator, hooks, 50_000);
    const pending = allocator.readBytes(ptr);
    allocator.dispose();
    expect(allocator.backend.readCopies.pendingCount).to.equal(0);
    expect(allocator.backend.readCopies.pinnedBytes).to.equal(0);
    expect(equalBytes(await pending, pattern)).to.equal(true);
    await new Promise((resolve) => setTimeout(resolve, 20)); // the wait in flight returns and destroys its event
    expect(hooks.liveEvents()).to.equal(eventsBefore);
  });
});
