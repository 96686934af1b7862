import { expect } from 'chai';
import { EventEmitter } from 'eventemitter3';
import type { Allocator, AllocatorEvents, BackendEvent, DataPtr as DataPtrType, HostBuffer, MemoryBackend, MinimalAllocator, SegmentSink } from '@stowage/core';
import {
  CpuMemoryBackend,
  createCpuAllocator,
  DataPtr,
  DisposedError,
  InvalidArgumentError,
  LimitingAllocator,
  makeAllocator,
  makeDirectAllocator,
  StowageError,
} from '@stowage/core';
import { VirtualMemoryBackend, allocatorContract } from '@stowage/core/testing';
import { allocatorNames, BenchUsageError, parseBenchFlags, selectByName } from '@stowage/bench-kit';

/** The arena example, loaded from its build output (core does not depend on it). */
interface ArenaModule {
  createArenaAllocator(options?: { capacity?: number | string; alignment?: number }): Allocator;
}
async function loadArena(): Promise<ArenaModule> {
  const url = new URL('../../../examples/arena-allocator/dist/index.js', import.meta.url).href;
  return (await import(url)) as ArenaModule;
}

function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

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

describe('createCpuAllocator', () => {
  it('rejects null options with InvalidArgumentError, not a TypeError', () => {
    const error = thrownBy(() => createCpuAllocator(null as never));
    expect(error).to.be.instanceOf(InvalidArgumentError);
  });
});

describe('VirtualMemoryBackend#constructor', () => {
  it('rejects an alignment that is not a positive power of two, instead of handing out one address twice', () => {
    for (const alignment of [-512, 0, 3]) {
      const error = thrownBy(() => {
        const backend = new VirtualMemoryBackend({ alignment });
        const a = backend.malloc(10)!;
        const b = backend.malloc(10)!;
        // What the bad alignment leads to when accepted: overlapping or unaligned segments.
        expect(a.address + a.byteLength <= b.address && a.address % alignment === 0, `segments with alignment ${alignment}`).to.equal(true);
      });
      expect(error, `alignment ${alignment}`).to.be.instanceOf(InvalidArgumentError);
    }
  });

  it('rejects a capacityBytes or pageBytes that is not a byte count', () => {
    expect(thrownBy(() => new VirtualMemoryBackend({ capacityBytes: Number.NaN })), 'capacityBytes NaN').to.be.instanceOf(InvalidArgumentError);
    expect(thrownBy(() => new VirtualMemoryBackend({ pageBytes: 1.5 })), 'pageBytes 1.5').to.be.instanceOf(InvalidArgumentError);
  });
});

describe('CpuMemoryBackend#constructor', () => {
  it('rejects a capacityBytes that is not a byte count instead of treating NaN as unlimited', () => {
    const error = thrownBy(() => {
      const backend = new CpuMemoryBackend({ capacityBytes: Number.NaN });
      expect(backend.malloc(1 << 20), 'a 1 MiB segment under a NaN budget').to.equal(null);
    });
    expect(error).to.be.instanceOf(InvalidArgumentError);
  });
});

describe('createArenaAllocator (examples/arena-allocator)', () => {
  it('aligns addresses to an alignment above 1 MiB', async () => {
    const { createArenaAllocator } = await loadArena();
    using allocator = createArenaAllocator({ capacity: '16MiB', alignment: 2 << 20 });
    const ptr = allocator.allocate(1);
    expect(ptr.address % allocator.alignment).to.equal(0);
    allocator.free(ptr);
  });

  it('rejects a capacity the host cannot allocate with a typed error', async () => {
    const { createArenaAllocator } = await loadArena();
    const error = thrownBy(() => createArenaAllocator({ capacity: '1PiB' }));
    expect(error).to.be.instanceOf(StowageError);
  });
});

describe('bench-kit allocatorNames', () => {
  it('rejects an --allocator flag that names no allocator, instead of selecting none', () => {
    const all = [{ name: 'best' }, { name: 'pytorch' }];
    for (const argv of [['--allocator='], ['--allocator', ',']]) {
      const error = thrownBy(() => {
        const flags = parseBenchFlags(argv, { allocator: { type: 'string', multiple: true } }, 'usage');
        const chosen = selectByName(all, allocatorNames(flags.allocator));
        expect(chosen, `allocators chosen by ${argv.join(' ')}`).to.not.deep.equal([]);
      });
      expect(error, argv.join(' ')).to.be.instanceOf(BenchUsageError);
    }
  });
});

/** Frees through an inner allocator, but announces `freed` before the free and with a different pointer. */
function earlyFreedAllocator(): Allocator {
  const inner = makeDirectAllocator(new CpuMemoryBackend());
  const emitter = new EventEmitter<AllocatorEvents>();
  inner.events.on('allocated', (e) => emitter.emit('allocated', e));
  inner.events.on('outOfMemory', (e) => emitter.emit('outOfMemory', e));
  const impostor = (ptr: DataPtrType): DataPtr =>
    new DataPtr({ device: ptr.device, byteLength: ptr.byteLength, handle: new ArrayBuffer(0), byteOffset: 0, address: 1, context: null, deleter: null });
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
  it("fails an allocator that emits freed before its state changes, with another pointer, in its event check", async () => {
    const check = allocatorContract.find((c) => c.name.startsWith('emits allocated and freed events'))!;
    let rejected: unknown;
    await check.run(earlyFreedAllocator).catch((e: unknown) => (rejected = e));
    expect(rejected, 'the event check should reject this allocator').to.be.instanceOf(Error);
  });
});

describe('AllocatorBase#memoryStats', () => {
  it('throws DisposedError after dispose, as the Allocator contract says of every method but dispose', () => {
    const allocator = makeDirectAllocator(new CpuMemoryBackend());
    allocator.allocate(64);
    allocator.dispose();
    // dispose() freed the 64 bytes; stats read now would still say they are allocated.
    expect(thrownBy(() => allocator.memoryStats())).to.be.instanceOf(DisposedError);
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
