import { expect } from 'chai';
import { EventEmitter } from 'eventemitter3';
import type { AllocateOptions, Allocator, DataPtr } from '@stowage/core';
import type { AllocatorEvents } from '@stowage/core/plugin-kit';
import { CpuMemoryBackend, createCpuAllocator, DataPtr as DataPtrClass, DisposedError, FailureCallbackAllocator, ForwardingAllocator, LoggingAllocator, makeAllocator, StatisticsAllocator, TrackingAllocator } from '@stowage/core';
import { makeDirectAllocator } from '@stowage/core/plugin-kit';
import type { AllocatorMaker } from '@stowage/core/testing';
import { allocatorContract, describeAllocatorContract } from '@stowage/core/testing';

describeAllocatorContract('two ForwardingAllocators stacked over the CPU allocator', () => new ForwardingAllocator(new ForwardingAllocator(createCpuAllocator())));

/** Runs every contract check against `make`; returns the names of the checks that failed. */
async function failedChecks(make: AllocatorMaker): Promise<string[]> {
  const failed: string[] = [];
  for (const check of allocatorContract) {
    try {
      await check.run(make);
    } catch {
      failed.push(check.name);
    }
  }
  return failed;
}

const check = (fragment: string): string => {
  const found = allocatorContract.find((c) => c.name.includes(fragment));
  if (!found) throw new Error(`no contract check mentions '${fragment}'`);
  return found.name;
};

/** Ignores a second free instead of rejecting it. */
class ForgivingAllocator extends ForwardingAllocator {
  override free(ptr: DataPtr): void {
    if (!ptr.isReleased) super.free(ptr);
  }
}

/** Hands every request the same memory, as an allocator with a broken free list would. */
function overlappingAllocator(): Allocator {
  const backend = new CpuMemoryBackend();
  const arena = backend.malloc(8 << 20)!;
  return makeAllocator({
    device: 'cpu',
    alignment: 64,
    allocate: (nbytes) => (nbytes <= arena.byteLength ? { ...arena, byteLength: Math.max(nbytes, 1) } : null),
    free: () => {},
    copy: (d, dOff, s, sOff, n) => backend.copy(d, dOff, s, sOff, n),
    write: (d, off, bytes) => backend.write(d, off, bytes),
    read: (s, off, n) => backend.read(s, off, n),
  });
}

/** Reports allocations it never subtracts on free. */
class LeakyStatsAllocator extends ForwardingAllocator {
  #frees = 0;
  override free(ptr: DataPtr): void {
    this.#frees++;
    super.free(ptr);
  }
  override memoryStats() {
    const s = super.memoryStats();
    return { ...s, 'allocation.all.current': s['allocation.all.current'] + this.#frees };
  }
}

/** Rounds the pointer down to a wrong alignment by reporting a size larger than asked. */
function paddingAllocator(): Allocator {
  const backend = new CpuMemoryBackend();
  return makeAllocator({
    device: 'cpu',
    alignment: 64,
    allocate: (nbytes) => {
      const block = backend.malloc(nbytes + 3);
      return block && { ...block, address: block.address + 3 };
    },
    free: (b) => backend.free(b),
    copy: (d, dOff, s, sOff, n) => backend.copy(d, dOff, s, sOff, n),
    write: (d, off, bytes) => backend.write(d, off, bytes),
    read: (s, off, n) => backend.read(s, off, n),
  });
}

/** Frees through an inner allocator, but announces `freed` before the free and with a different pointer. */
function earlyFreedAllocator(): Allocator {
  const inner = makeDirectAllocator(new CpuMemoryBackend());
  const emitter = new EventEmitter<AllocatorEvents>();
  inner.events.on('allocated', (e) => emitter.emit('allocated', e));
  inner.events.on('outOfMemory', (e) => emitter.emit('outOfMemory', e));
  const impostor = (ptr: DataPtr): DataPtr =>
    new DataPtrClass({ device: ptr.device, byteLength: ptr.byteLength, handle: new ArrayBuffer(0), byteOffset: 0, address: 1, context: null, deleter: null });
  return {
    device: inner.device,
    alignment: inner.alignment,
    events: emitter,
    allocate: (n, o) => inner.allocate(n, o),
    free: (ptr) => {
      emitter.emit('freed', { ptr: impostor(ptr) }); // state not yet changed, and not the pointer freed
      inner.free(ptr);
    },
    copyData: (d, s, n, dOff, sOff) => inner.copyData(d, s, n, dOff, sOff),
    writeBytes: (d, b, off) => inner.writeBytes(d, b, off),
    readBytes: (s, off, n) => inner.readBytes(s, off, n),
    memoryStats: () => inner.memoryStats(),
    resetPeakStats: () => inner.resetPeakStats(),
    snapshot: () => inner.snapshot(),
    emptyCache: () => inner.emptyCache(),
    dispose: () => inner.dispose(),
    [Symbol.dispose]: () => inner.dispose(),
  };
}

describe('allocatorContract', () => {
  it('passes the CPU allocator on every check', async () => {
    expect(await failedChecks(() => createCpuAllocator())).to.deep.equal([]);
  });

  it('fails an allocator that ignores a double free', async () => {
    const failed = await failedChecks(() => new ForgivingAllocator(createCpuAllocator()));
    expect(failed).to.include(check('double free'));
  });

  it('fails an allocator whose live blocks overlap', async () => {
    const failed = await failedChecks(overlappingAllocator);
    expect(failed).to.include.members([check('isolated'), check('disjoint')]);
  });

  it('fails an allocator whose statistics disagree with a recount', async () => {
    const failed = await failedChecks(() => new LeakyStatsAllocator(createCpuAllocator()));
    expect(failed).to.include(check('recount'));
  });

  it('fails an allocator that returns misaligned pointers', async () => {
    const failed = await failedChecks(paddingAllocator);
    expect(failed).to.include(check('aligned'));
  });

  it("fails an allocator that emits freed before its state changes, with another pointer, in its event check", async () => {
    const check = allocatorContract.find((c) => c.name.startsWith('emits allocated and freed events'))!;
    let rejected: unknown;
    await check.run(earlyFreedAllocator).catch((e: unknown) => (rejected = e));
    expect(rejected, 'the event check should reject this allocator').to.be.instanceOf(Error);
  });
});

describe('ForwardingAllocator#dispose', () => {
  const makers: [string, (a: Allocator) => Allocator][] = [
    ['StatisticsAllocator', (a) => new StatisticsAllocator(a, { ownsUpstream: false })],
    ['TrackingAllocator', (a) => new TrackingAllocator(a, { ownsUpstream: false })],
    ['LoggingAllocator', (a) => new LoggingAllocator(a, () => {}, { ownsUpstream: false })],
    ['FailureCallbackAllocator', (a) => new FailureCallbackAllocator(a, () => false, { ownsUpstream: false })],
  ];
  for (const [name, make] of makers) {
    it(`${name} refuses allocate() after dispose when it does not own its upstream`, () => {
      using base = createCpuAllocator();
      const adaptor = make(base);
      adaptor.dispose();
      expect(() => adaptor.allocate(8)).to.throw(DisposedError);
    });
  }
});

/** Counts live pointers through the adoption hook, whichever path releases them. */
class CountingAllocator extends ForwardingAllocator {
  live = 0;
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    const ptr = super.allocate(nbytes, options);
    this.live++;
    return ptr;
  }
  protected override onReleased(): void {
    this.live--;
  }
}

describeAllocatorContract('an adopting adaptor (onReleased) over the CPU allocator', () => new CountingAllocator(createCpuAllocator()));

describe('ForwardingAllocator', () => {
  it('sees every release of an adopted pointer, through free() or ptr.release(), once', () => {
    using allocator = new CountingAllocator(createCpuAllocator());
    const a = allocator.allocate(8);
    const b = allocator.allocate(8);
    expect(allocator.live).to.equal(2);
    allocator.free(a);
    b.release();
    expect(allocator.live).to.equal(0);
    expect(() => allocator.free(b)).to.throw(/already released/);
    expect(allocator.live).to.equal(0);
    expect(allocator.upstream.memoryStats()['allocation.all.current']).to.equal(0);
  });

  it('refuses to free an adopted pointer through the upstream, which no longer owns it', () => {
    using allocator = new CountingAllocator(createCpuAllocator());
    const ptr = allocator.allocate(8);
    expect(() => allocator.upstream.free(ptr)).to.throw(/did not allocate it/);
    allocator.free(ptr);
  });

  it('stacks adaptors over an upstream and forwards to the bottom of the stack', () => {
    const base = createCpuAllocator();
    const stack = new ForgivingAllocator(new ForgivingAllocator(base));
    expect(stack.upstream.upstream).to.equal(base);
    const ptr = stack.allocate(100);
    expect(base.memoryStats()['allocation.all.current']).to.equal(1);
    stack.free(ptr);
    stack.dispose();
    expect(() => base.allocate(1)).to.throw(/disposed/);
  });

  it('leaves an upstream it does not own alive on dispose', () => {
    using base = createCpuAllocator();
    new ForwardingAllocator(base, { ownsUpstream: false }).dispose();
    expect(base.allocate(8).byteLength).to.equal(8);
  });
});

