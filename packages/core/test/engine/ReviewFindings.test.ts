import { expect } from 'chai';
import type { DataPtr, MemoryReclaimer, PageMapping } from '@stowage/core';
import { InvalidArgumentError, OutOfMemoryError, StorageImpl } from '@stowage/core';
import { engine, KiB, MiB } from './helpers.js';

/** Records every page-mapping call of a virtual backend. */
function spyPages(mapping: PageMapping<number>): { unmaps: [offset: number, bytes: number][]; reserves: number; releases: number } {
  const spy = { unmaps: [] as [number, number][], reserves: 0, releases: 0 };
  const m = mapping as { -readonly [K in keyof PageMapping<number>]: PageMapping<number>[K] };
  const { unmap, reserve, release } = mapping;
  m.unmap = (range, offset, bytes) => {
    spy.unmaps.push([offset, bytes]);
    unmap(range, offset, bytes);
  };
  m.reserve = (bytes) => {
    spy.reserves++;
    return reserve(bytes);
  };
  m.release = (range) => {
    spy.releases++;
    release(range);
  };
  return spy;
}

describe('CachingAllocator#emptyCache (expandable segments)', () => {
  it('unmaps only whole pages inside a free block whose front partial page is larger than its back one', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', expandableSegments: true });
    const page = backend.pageMapping!.pageBytes;
    const spy = spyPages(backend.pageMapping!);
    const a = allocator.allocate(1.5 * MiB); // [0, 1.5)
    const b = allocator.allocate(3 * MiB); // [1.5, 4.5)
    const c = allocator.allocate(1.5 * MiB); // [4.5, 6): shares the page [4, 6) with b
    allocator.free(b);
    allocator.emptyCache();
    allocator.assertInvariants();
    const base = a.address;
    for (const [offset, bytes] of spy.unmaps) {
      expect(offset % page, `unmap offset ${offset}`).to.equal(0);
      expect(bytes % page, `unmap length ${bytes}`).to.equal(0);
      // Never unmap a page that holds part of a live block.
      for (const live of [a, c]) {
        const liveStart = Math.floor((live.address - base) / page) * page;
        const liveEnd = Math.ceil((live.address - base + live.byteLength) / page) * page;
        expect(offset + bytes <= liveStart || offset >= liveEnd, `unmapped [${offset}, ${offset + bytes}) overlaps a live page`).to.equal(true);
      }
    }
    expect(backend.reservedBytes, 'only the page [2, 4) MiB went back').to.equal(4 * MiB);
  });

  it('unmaps whole pages when it returns an expandable segment with partial-page blocks', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', expandableSegments: true });
    const page = backend.pageMapping!.pageBytes;
    const spy = spyPages(backend.pageMapping!);
    allocator.allocate(1.5 * MiB); // [0, 1.5) allocated, [1.5, 2) free
    allocator.dispose();
    expect(spy.unmaps.length).to.be.greaterThan(0);
    for (const [offset, bytes] of spy.unmaps) {
      expect(offset % page, `unmap offset ${offset}`).to.equal(0);
      expect(bytes % page, `unmap length ${bytes}`).to.equal(0);
    }
    expect(backend.reservedBytes).to.equal(0);
  });
});

describe('CachingAllocator#allocate (out-of-memory chain)', () => {
  it('releases the address range it reserved for a request larger than the range', () => {
    const { allocator, backend } = engine({ preset: 'pytorch', expandableSegments: true }, { capacityBytes: 64 * MiB });
    const spy = spyPages(backend.pageMapping!);
    expect(() => allocator.allocate(1024 * MiB)).to.throw(OutOfMemoryError);
    expect(spy.releases, 'every range reserved for the failed request went back').to.equal(spy.reserves);
    allocator.assertInvariants();
  });

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

  it('serves a request from blocks a reclaimer freed into the quick lists, before reporting out of memory', () => {
    // deferCoalescing: blocks a reclaimer frees wait unmerged in quick lists; only their merge makes room.
    const held: DataPtr[] = [];
    const reclaimers: MemoryReclaimer[] = [{ reclaim: () => held.splice(0).reduce((n, p) => (p.release(), n + p.byteLength), 0) }];
    const { allocator } = engine({ preset: 'best', expandableSegments: false, reclaimers: () => reclaimers }, { capacityBytes: 2 * MiB });
    for (let i = 0; i < 4; i++) held.push(allocator.allocate(16 * KiB)); // [0, 64 KiB)
    allocator.allocate(MiB); // [64 KiB, 1088 KiB)
    allocator.allocate(960 * KiB); // the rest of the only segment the device can hold
    const ptr = allocator.allocate(64 * KiB);
    expect(ptr.byteLength).to.equal(64 * KiB);
    allocator.assertInvariants();
  });
});

describe('StorageImpl#resize', () => {
  it('rejects a bad size or a non-resizable storage without running the write path', () => {
    const { allocator } = engine();
    let writes = 0;
    const storage = new StorageImpl({ dataPtr: allocator.allocate(64), allocator, hooks: [{ beforeWrite: () => void writes++ }] });
    expect(() => storage.resize(128)).to.throw(InvalidArgumentError);
    expect(() => storage.resize(-1)).to.throw(InvalidArgumentError);
    expect(writes, 'a rejected resize must not materialize (COW) or move generations').to.equal(0);
  });
});

describe('CachingAllocator events (expandable segments)', () => {
  it('emits segmentReserved for a new expandable segment once a snapshot accounts for its bytes', () => {
    const { allocator } = engine({ preset: 'pytorch', expandableSegments: true });
    const seen: [snapshotBytes: number, reservedBytes: number][] = [];
    allocator.events.on('segmentReserved', () => {
      const snapshotBytes = allocator.snapshot().segments.reduce((n, s) => n + s.total_size, 0);
      seen.push([snapshotBytes, allocator.memoryStats()['reserved_bytes.all.current']]);
    });
    allocator.allocate(3 * MiB); // a new expandable segment
    allocator.allocate(3 * MiB); // grows it
    expect(seen).to.have.length(2);
    for (const [snapshotBytes, reservedBytes] of seen) expect(snapshotBytes).to.equal(reservedBytes);
  });

  for (const [name, options] of [
    ['expandable', { preset: 'best' }],
    ['fixed', { preset: 'pytorch' }],
  ] as const) {
    it(`never hands a listener that allocates from segmentReserved the block being reserved (${name} segments)`, () => {
      const { allocator } = engine(options);
      const fromListener: DataPtr[] = [];
      let calls = 0;
      allocator.events.on('segmentReserved', () => {
        if (calls++ < 3) fromListener.push(allocator.allocate(3 * MiB));
      });
      const outer = allocator.allocate(3 * MiB); // new segment; the listener allocates, growing it again
      const more = allocator.allocate(5 * MiB); // and a free tail being extended
      const all = [outer, more, ...fromListener];
      expect(fromListener.length).to.be.greaterThan(0);
      const ranges = all.map((p) => [p.address, p.address + p.byteLength] as const).sort((x, y) => x[0] - y[0]);
      for (let i = 1; i < ranges.length; i++) expect(ranges[i]![0], 'overlapping allocations').to.be.at.least(ranges[i - 1]![1]);
      allocator.assertInvariants();
      for (const p of all) allocator.free(p);
      allocator.emptyCache();
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    });
  }
});

describe('CachingAllocator segmentReleased (expandable)', () => {
  it('is emitted once the unmapped gap is in place, so a snapshot in the listener is consistent', () => {
    const { allocator } = engine({ preset: 'best' });
    const a = allocator.allocate(3 * MiB);
    const b = allocator.allocate(6 * MiB);
    allocator.allocate(3 * MiB);
    allocator.free(b);
    const seen: number[] = [];
    allocator.events.on('segmentReleased', () => {
      allocator.assertInvariants();
      for (const s of allocator.snapshot().segments) seen.push(s.total_size - s.blocks.reduce((n, x) => n + x.size, 0));
    });
    allocator.emptyCache();
    expect(seen.length).to.be.greaterThan(0);
    expect(seen.every((d) => d === 0), 'mapped blocks add up to the mapped size in every listener call').to.equal(true);
    allocator.free(a);
  });
});
