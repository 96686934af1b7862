import { expect } from 'chai';
import type { Allocator, MemoryBackend, MinimalAllocator } from '@stowage/core';
import type { BackendEvent, MemoryBlock, SegmentSink } from '@stowage/core/plugin-kit';
import { CpuMemoryBackend, DeviceError, InvalidArgumentError, makeAllocator, OutOfMemoryError, StowageError } from '@stowage/core';
import { makeDirectAllocator } from '@stowage/core/plugin-kit';
import type { HostBuffer } from '@stowage/core/plugin-kit';
import { thrownBy } from './engine/helpers.js';
import { assertAllocatorInvariants, VirtualMemoryBackend } from '@stowage/core/testing';

/** The arena example, loaded from its build output (core does not depend on it). */
interface ArenaModule {
  createArenaAllocator(options?: { capacity?: number | string; alignment?: number }): Allocator;
}
async function loadArena(): Promise<ArenaModule> {
  const url = new URL('../../../examples/arena-allocator/dist/index.js', import.meta.url).href;
  return (await import(url)) as ArenaModule;
}

/** A minimal allocator over a CPU backend with a cache of freed blocks that only emptyCache returns. */
function cachingCore(capacityBytes: number) {
  const backend = new CpuMemoryBackend({ capacityBytes });
  const cached: MemoryBlock<HostBuffer>[] = [];
  const calls: string[] = [];
  let sink: SegmentSink = { reserved: () => {}, released: () => {} };
  const core: MinimalAllocator<HostBuffer> = {
    device: 'cpu',
    alignment: 64,
    capacityBytes,
    allocate: (n) => {
      calls.push(`allocate ${n}`);
      const hit = cached.findIndex((b) => b.byteLength === n);
      if (hit >= 0) return cached.splice(hit, 1)[0]!;
      const block = backend.malloc(n);
      if (block) sink.reserved({ address: block.address, byteLength: block.byteLength });
      return block;
    },
    free: (b) => void cached.push(b),
    copy: (d, dOff, s, sOff, n) => backend.copy(d, dOff, s, sOff, n),
    write: (d, off, bytes) => backend.write(d, off, bytes),
    read: (s, off, n) => backend.read(s, off, n),
    bindSegments: (s) => (sink = s),
    emptyCache: () => {
      calls.push('emptyCache');
      for (const b of cached.splice(0)) {
        backend.free(b);
        sink.released({ address: b.address, byteLength: b.byteLength });
      }
    },
  };
  return { core, calls, backend };
}

describe('makeAllocator#allocate', () => {
  it('empties the cache and retries once before reporting out of memory', () => {
    const { core, calls } = cachingCore(1000);
    using allocator = makeAllocator(core);
    allocator.free(allocator.allocate(600));
    calls.length = 0;
    const ptr = allocator.allocate(700);
    expect(calls).to.deep.equal(['allocate 700', 'emptyCache', 'allocate 700']);
    expect(allocator.memoryStats().num_alloc_retries).to.equal(1);
    calls.length = 0;
    expect(() => allocator.allocate(400)).to.throw(OutOfMemoryError);
    expect(calls).to.deep.equal(['allocate 400', 'emptyCache', 'allocate 400']);
    expect(allocator.memoryStats().num_ooms).to.equal(1);
    allocator.free(ptr);
  });

  it('counts the segments a core reports as reserved, with their peak', () => {
    const { core } = cachingCore(10_000);
    using allocator = makeAllocator(core);
    allocator.free(allocator.allocate(3000));
    const s = allocator.memoryStats();
    expect(s['reserved_bytes.all.current']).to.equal(3000);
    expect(s['allocated_bytes.all.current']).to.equal(0);
    allocator.emptyCache();
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    expect(allocator.memoryStats()['reserved_bytes.all.peak']).to.equal(3000);
    expect(allocator.memoryStats()['segment.all.allocated']).to.equal(1);
    allocator.resetPeakStats();
    expect(allocator.memoryStats()['reserved_bytes.all.peak']).to.equal(0);
  });

  it('mentions fragmentation when the cache could have held the request', () => {
    const { core } = cachingCore(1000);
    core.emptyCache = () => {}; // a cache that cannot give memory back
    using allocator = makeAllocator(core);
    allocator.free(allocator.allocate(800));
    expect(() => allocator.allocate(500)).to.throw(OutOfMemoryError, /fragmented/);
  });

  it('rejects an alignment that is not a power of two', () => {
    const { core } = cachingCore(1000);
    expect(() => makeAllocator({ ...core, alignment: 48 })).to.throw(InvalidArgumentError, /alignment must be a power of two; got 48/);
  });

  it('splits statistics into the small (<= 1 MiB) and large pools', () => {
    const { core } = cachingCore(8 << 20);
    using allocator = makeAllocator(core);
    allocator.allocate(1 << 20);
    allocator.allocate((1 << 20) + 1);
    const s = allocator.memoryStats();
    expect(s['allocated_bytes.small_pool.current']).to.equal(1 << 20);
    expect(s['allocated_bytes.large_pool.current']).to.equal((1 << 20) + 1);
    expect(s['allocation.all.current']).to.equal(2);
  });
});

describe('makeAllocator#memoryStats', () => {
  it('counts num_device_alloc per segment the core reserves, not per allocation', async () => {
    const { createArenaAllocator } = await loadArena();
    using allocator = createArenaAllocator({ capacity: '1MiB' }); // one segment, reserved at construction
    for (let i = 0; i < 5; i++) allocator.free(allocator.allocate(1000));
    const s = allocator.memoryStats();
    expect(s['segment.all.allocated'], 'segments the core reported').to.equal(1);
    expect(s.num_device_alloc, 'device allocations').to.equal(s['segment.all.allocated']);
  });
});

describe('makeAllocator#free', () => {
  it('emits segmentReleased only once the freed allocation is no longer counted as allocated', () => {
    // A core that gives each block its own segment and returns it to the device as soon as the block is freed.
    const backend = new CpuMemoryBackend();
    let sink: SegmentSink = { reserved: () => {}, released: () => {} };
    const core: MinimalAllocator<HostBuffer> = {
      device: 'cpu',
      alignment: 64,
      allocate: (n) => {
        const block = backend.malloc(n);
        if (block) sink.reserved({ address: block.address, byteLength: block.byteLength });
        return block;
      },
      free: (b) => {
        backend.free(b);
        sink.released({ address: b.address, byteLength: b.byteLength });
      },
      copy: (d, dOff, s, sOff, n) => backend.copy(d, dOff, s, sOff, n),
      write: (d, off, bytes) => backend.write(d, off, bytes),
      read: (s, off, n) => backend.read(s, off, n),
      bindSegments: (s) => (sink = s),
    };
    using allocator = makeAllocator(core);
    const seen: { reserved: number; allocated: number }[] = [];
    allocator.events.on('segmentReleased', () => {
      const s = allocator.memoryStats();
      seen.push({ reserved: s['reserved_bytes.all.current'], allocated: s['allocated_bytes.all.current'] });
    });
    allocator.free(allocator.allocate(4096));
    expect(seen).to.have.length(1);
    expect(seen[0]!.reserved, 'reserved_bytes >= allocated_bytes as seen by a segmentReleased listener').to.be.at.least(seen[0]!.allocated);
  });
});

/** A VirtualMemoryBackend seen through a backend whose frees wait for an event (as WebGPU's do). */
function deferredFreeBackend(): { backend: MemoryBackend<number>; device: VirtualMemoryBackend } {
  const device = new VirtualMemoryBackend();
  const backend: MemoryBackend<number> = {
    device: device.device,
    alignment: device.alignment,
    capacityBytes: device.capacityBytes,
    defaultStream: 0,
    deferredFree: true,
    malloc: (n) => device.malloc(n),
    free: (s) => device.free(s),
    copy: (d, dOff, s, sOff, n) => device.copy(d, dOff, s, sOff, n),
    write: (d, off, bytes) => device.write(d, off, bytes),
    read: (s, off, n) => device.read(s, off, n),
    isStream: (s) => device.isStream(s),
    recordEvent: (s) => device.recordEvent(s),
    isEventComplete: (e: BackendEvent) => device.isEventComplete(e),
    synchronizeEvent: (e: BackendEvent) => device.synchronizeEvent(e),
  };
  return { backend, device };
}

describe('makeDirectAllocator#memoryStats', () => {
  it('reports memory held for a deferred free as reserved until the backend frees it', () => {
    const { backend, device } = deferredFreeBackend();
    device.holdStream(0);
    using allocator = makeDirectAllocator(backend);
    allocator.free(allocator.allocate(1 << 20));
    expect(device.reservedBytes, 'the backend still holds the block').to.equal(1 << 20);
    expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(device.reservedBytes);
  });
});

describe('makeDirectAllocator#allocate', () => {
  it('rejects a stream the backend does not have with InvalidArgumentError', () => {
    using allocator = makeDirectAllocator(new VirtualMemoryBackend({ streams: 1 }));
    const error = thrownBy(() => allocator.allocate(16, { stream: 7 }));
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
  });

  it('rejects null options with InvalidArgumentError, not a TypeError', () => {
    using allocator = makeDirectAllocator(new CpuMemoryBackend());
    const error = thrownBy(() => allocator.allocate(16, null as never));
    expect(error).to.be.instanceOf(StowageError);
  });
});

/** A core over a CPU backend whose allocate is replaced by `fault` for the request it names. */
function faultyCore(fault: (nbytes: number, good: (n: number) => MemoryBlock<HostBuffer>) => unknown, read?: MinimalAllocator<HostBuffer>['read']) {
  const backend = new CpuMemoryBackend();
  const freed: unknown[] = [];
  const core: MinimalAllocator<HostBuffer> = {
    device: 'cpu',
    alignment: 64,
    allocate: (n) => fault(n, (m) => backend.malloc(m)!) as MemoryBlock<HostBuffer> | null,
    free: (b) => {
      freed.push(b);
      backend.free(b);
    },
    copy: (d, dOff, s, sOff, n) => backend.copy(d, dOff, s, sOff, n),
    write: (d, off, bytes) => backend.write(d, off, bytes),
    read: read ?? ((s, off, n) => backend.read(s, off, n)),
  };
  return { core, freed };
}

describe('makeAllocator (checking the core)', () => {
  const faults: { name: string; fault: (n: number, good: (n: number) => MemoryBlock<HostBuffer>) => unknown; message: RegExp }[] = [
    { name: 'a block smaller than the request', fault: (n, good) => (n === 1000 ? good(16) : good(n)), message: /block of 16 bytes for a 1000-byte request/ },
    { name: 'a misaligned address', fault: (n, good) => (n === 1000 ? { ...good(n), address: good(64).address + 8 } : good(n)), message: /not a multiple of its alignment 64/ },
    { name: 'undefined instead of a block or null', fault: (n, good) => (n === 1000 ? undefined : good(n)), message: /returned undefined instead of a block or null/ },
    { name: 'a non-integer byteLength', fault: (n, good) => (n === 1000 ? { ...good(n), byteLength: Number.NaN } : good(n)), message: /block of NaN bytes/ },
    { name: 'a negative address', fault: (n, good) => (n === 1000 ? { ...good(n), address: -64 } : good(n)), message: /address -64/ },
  ];
  for (const { name, fault, message } of faults) {
    it(`refuses ${name} with a DeviceError naming the core's fault, counting nothing`, () => {
      const { core } = faultyCore(fault);
      using allocator = makeAllocator(core);
      const live = [allocator.allocate(100)];
      const error = thrownBy(() => allocator.allocate(1000));
      expect(error).to.be.instanceOf(DeviceError);
      expect((error as Error).message).to.match(/minimal allocator for cpu:0 broke its contract/).and.match(message);
      assertAllocatorInvariants(allocator, live);
      live.push(allocator.allocate(200));
      assertAllocatorInvariants(allocator, live);
    });
  }

  it('refuses a block at the address of another live block, and hands the refused block back to the core', () => {
    let first: MemoryBlock<HostBuffer> | undefined;
    const { core, freed } = faultyCore((n, good) => {
      if (first === undefined) return (first = good(n));
      return n === 1000 ? { ...good(n), address: first.address } : good(n);
    });
    using allocator = makeAllocator(core);
    const live = [allocator.allocate(100)];
    expect(() => allocator.allocate(1000)).to.throw(DeviceError, /where another live block starts/);
    expect(freed).to.have.length(1);
    assertAllocatorInvariants(allocator, live);
  });

  it('refuses a read that returns fewer bytes than asked with a DeviceError', async () => {
    const backend = new CpuMemoryBackend();
    const { core } = faultyCore((n, good) => good(n), async (s, off, n) => (await backend.read(s, off, n)).subarray(0, n - 1));
    using allocator = makeAllocator(core);
    const ptr = allocator.allocate(100);
    let error: unknown;
    await allocator.readBytes(ptr).catch((e: unknown) => (error = e));
    expect(error).to.be.instanceOf(DeviceError);
    expect((error as Error).message).to.match(/read\(\) of 100 bytes returned 99 bytes/);
  });

  it("wraps a core's own error in allocate() in a DeviceError naming the core and the call, counting nothing", () => {
    const { core } = faultyCore((n, good) => {
      if (n === 1000) throw new RangeError('the arena is exhausted');
      return good(n);
    });
    using allocator = makeAllocator(core);
    const live = [allocator.allocate(100)];
    const error = thrownBy(() => allocator.allocate(1000));
    expect(error).to.be.instanceOf(DeviceError);
    expect((error as Error).message).to.equal('The minimal allocator for cpu:0 failed in allocate(1000): the arena is exhausted');
    expect((error as Error).cause).to.be.instanceOf(RangeError);
    assertAllocatorInvariants(allocator, live);
    live.push(allocator.allocate(200));
    assertAllocatorInvariants(allocator, live);
  });

  it("wraps a core's rejected read() in a DeviceError", async () => {
    const { core } = faultyCore((n, good) => good(n), () => Promise.reject(new Error('bus error')));
    using allocator = makeAllocator(core);
    const ptr = allocator.allocate(100);
    let error: unknown;
    await allocator.readBytes(ptr).catch((e: unknown) => (error = e));
    expect(error).to.be.instanceOf(DeviceError);
    expect((error as Error).message).to.match(/failed in read\(\): bus error/);
    assertAllocatorInvariants(allocator, [ptr]);
  });

  it("wraps a core's throwing free() in a DeviceError, with the pointer released and the statistics counted out", () => {
    const { core } = faultyCore((n, good) => good(n));
    const free = core.free;
    let broken = true;
    core.free = (block) => {
      if (broken) throw new TypeError('free list corrupt');
      free(block);
    };
    using allocator = makeAllocator(core);
    const kept = allocator.allocate(64);
    const ptr = allocator.allocate(100);
    expect(() => ptr.release()).to.throw(DeviceError, /failed in free\(\): free list corrupt/);
    expect(ptr.isReleased).to.equal(true);
    assertAllocatorInvariants(allocator, [kept]);
    broken = false;
  });

  it("passes a core's own StowageError through unchanged", () => {
    const own = new InvalidArgumentError('nbytes', 1000, 'at most 512 bytes (this core serves small blocks only)');
    const { core } = faultyCore((n, good) => {
      if (n === 1000) throw own;
      return good(n);
    });
    using allocator = makeAllocator(core);
    expect(thrownBy(() => allocator.allocate(1000))).to.equal(own);
  });

  const notCores: { name: string; core: unknown; argument: string }[] = [
    { name: 'null', core: null, argument: 'core' },
    { name: 'a string', core: 'cpu', argument: 'core' },
    { name: 'a core without allocate', core: { device: 'cpu', alignment: 64, free() {}, copy() {}, write() {}, read() {} }, argument: 'core.allocate' },
    { name: 'a core with a bad device', core: { device: 7, alignment: 64, allocate() {}, free() {}, copy() {}, write() {}, read() {} }, argument: 'core.device' },
    { name: 'a core with a non-function emptyCache', core: { device: 'cpu', alignment: 64, allocate() {}, free() {}, copy() {}, write() {}, read() {}, emptyCache: 1 }, argument: 'core.emptyCache' },
  ];
  for (const { name, core, argument } of notCores) {
    it(`refuses ${name} at once with InvalidArgumentError naming ${argument}`, () => {
      const error = thrownBy(() => makeAllocator(core as MinimalAllocator));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
    });
  }

  it('refuses a backend that is not a MemoryBackend in makeDirectAllocator', () => {
    expect(() => makeDirectAllocator(null as unknown as MemoryBackend)).to.throw(InvalidArgumentError, /^backend must be a MemoryBackend/);
  });
});
