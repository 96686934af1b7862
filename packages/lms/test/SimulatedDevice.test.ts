import { expect } from 'chai';
import type { DataPtr, HostBuffer } from '@stowage/core';
import { CachingAllocator, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import { describeAllocatorContract, patternBytes } from '@stowage/core/testing';
import type { LinkProfile } from '@stowage/lms';
import { copyDurationNs, LINK_PROFILES, SimulatedDevice } from '@stowage/lms';

const MiB = 1 << 20;

/** 1 byte per nanosecond plus 100 ns a copy: a 1000-byte copy takes 1100 ns, easy to add up by hand. */
const ONE_BYTE_PER_NS: LinkProfile = { bytesPerSecond: 1e9, latencyNs: 100 };

/** A device on the hand-checkable link and an allocator over it. */
function setup(link: LinkProfile = ONE_BYTE_PER_NS): { device: SimulatedDevice; allocator: CachingAllocator<HostBuffer> } {
  const device = new SimulatedDevice({ link });
  return { device, allocator: new CachingAllocator(device, {}) };
}

function span(entry: { startNs: number; endNs: number }): [number, number] {
  return [entry.startNs, entry.endNs];
}

function bytesOf(ptr: DataPtr): Uint8Array {
  return new Uint8Array(ptr.handle as HostBuffer, ptr.byteOffset, ptr.byteLength);
}

describe('LinkProfile', () => {
  it('times a copy as latency plus bytes over bandwidth, rounded up to whole nanoseconds', () => {
    expect(copyDurationNs(LINK_PROFILES.pcie4, MiB)).to.equal(2000 + 32_768); // 2^20 B / 32e9 B/s = 32 768 ns
    expect(copyDurationNs(LINK_PROFILES.pcie5, MiB)).to.equal(2000 + 16_384);
    expect(copyDurationNs(LINK_PROFILES.c2c, MiB)).to.equal(1000 + 2331); // 2330.03 ns, rounded up
    expect(copyDurationNs(LINK_PROFILES.pcie4, 1e9)).to.equal(2000 + 31_250_000);
    expect(copyDurationNs(LINK_PROFILES.c2c, 450e9)).to.equal(1000 + 1e9); // exact: no float error at 450 GB
    expect(copyDurationNs(LINK_PROFILES.pcie4, 0)).to.equal(2000);
  });

  it('gives each named profile its nominal bandwidth and latency', () => {
    expect(new SimulatedDevice().link).to.deep.equal({ bytesPerSecond: 32e9, latencyNs: 2000 });
    expect(new SimulatedDevice({ link: 'pcie5' }).link).to.deep.equal({ bytesPerSecond: 64e9, latencyNs: 2000 });
    expect(new SimulatedDevice({ link: 'c2c' }).link).to.deep.equal({ bytesPerSecond: 450e9, latencyNs: 1000 });
    expect(new SimulatedDevice({ link: ONE_BYTE_PER_NS }).copyDurationNs(1000)).to.equal(1100);
  });

  it('refuses an unknown name and a custom profile without a positive whole bandwidth', () => {
    expect(() => new SimulatedDevice({ link: 'pcie6' as 'pcie5' })).to.throw(InvalidArgumentError, /options\.link/);
    expect(() => new SimulatedDevice({ link: { bytesPerSecond: 0, latencyNs: 0 } })).to.throw(InvalidArgumentError, /bytesPerSecond/);
    expect(() => new SimulatedDevice({ link: { bytesPerSecond: 1e9, latencyNs: -1 } })).to.throw(InvalidArgumentError, /latencyNs/);
    expect(() => new SimulatedDevice({ linc: 'pcie4' } as never)).to.throw(InvalidArgumentError);
  });
});

describe('SimulatedDevice#pager', () => {
  it('takes latency plus bytes over bandwidth for one copy, and holds the bytes at once', async () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    bytesOf(a).set(patternBytes(1000, 1));
    const out = device.pager.pageOut(a);
    expect(span(out.entry)).to.deep.equal([0, 1100]);
    expect(device.timeline).to.deep.equal([{ engine: 'd2h', name: 'pageOut', startNs: 0, endNs: 1100, bytes: 1000 }]);
    expect(out.bytes).to.deep.equal(patternBytes(1000, 1));
    expect(await out.done).to.equal(out.bytes);
    expect(device.now, 'the host did not wait').to.equal(0);
    expect(device.stats.makespanNs).to.equal(1100);
  });

  it('times one MiB over pcie4 at 34 768 ns', () => {
    const { device, allocator } = setup(LINK_PROFILES.pcie4);
    const out = device.pager.pageOut(allocator.allocate(MiB));
    expect(span(out.entry)).to.deep.equal([0, 34_768]);
  });

  it('overlaps two copies in opposite directions', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    const b = allocator.allocate(1000);
    const out = device.pager.pageOut(a);
    const back = device.pager.pageIn(patternBytes(1000, 2), b);
    expect(span(out.entry)).to.deep.equal([0, 1100]);
    expect(span(back)).to.deep.equal([0, 1100]);
    expect(device.synchronize()).to.equal(1100);
    expect(bytesOf(b)).to.deep.equal(patternBytes(1000, 2));
  });

  it('serialises two copies in the same direction', () => {
    const { device, allocator } = setup();
    const first = device.pager.pageIn(patternBytes(1000, 1), allocator.allocate(1000));
    const second = device.pager.pageIn(patternBytes(2000, 2), allocator.allocate(2000));
    expect(span(first)).to.deep.equal([0, 1100]);
    expect(span(second)).to.deep.equal([1100, 1100 + 2100]);
    expect(device.stats.h2d).to.deep.equal({ operations: 2, busyNs: 3200, idleNs: 0, bytes: 3000 });
  });

  it('starts a page-out after the last kernel that writes its block', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    const b = allocator.allocate(1000);
    device.kernel('fill', 3000, { writes: [a] }, () => bytesOf(a).set(patternBytes(1000, 7)));
    device.kernel('readA', 500, { reads: [a], writes: [b] });
    const out = device.pager.pageOut(a);
    expect(span(out.entry), 'waits for fill, not for readA, which only reads a').to.deep.equal([3000, 4100]);
    expect(out.bytes).to.deep.equal(patternBytes(1000, 7));
  });

  it('lets a freed block whose page-out is in flight be reused, the reuse waiting for the copy', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    bytesOf(a).set(patternBytes(1000, 1));
    const out = device.pager.pageOut(a);
    allocator.free(a);
    const reused = allocator.allocate(1000);
    expect(reused.address, 'the engine hands out the same block').to.equal(a.address);
    const overwrite = device.kernel('overwrite', 200, { writes: [reused] }, () => bytesOf(reused).set(patternBytes(1000, 2)));
    expect(span(overwrite), 'write after read: after the page-out').to.deep.equal([1100, 1300]);
    expect(out.bytes, 'the page-out keeps the bytes it read').to.deep.equal(patternBytes(1000, 1));
  });

  it('starts a page-in of paged-out bytes only once the page-out has brought them to the host', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    bytesOf(a).set(patternBytes(1000, 3));
    const out = device.pager.pageOut(a);
    allocator.free(a);
    const b = allocator.allocate(1000);
    const back = device.pager.pageIn(out.bytes, b);
    expect(span(back)).to.deep.equal([1100, 2200]);
    expect(bytesOf(b)).to.deep.equal(patternBytes(1000, 3));
  });
});

describe('SimulatedDevice#kernel', () => {
  it('waits for a page-in into a block it reads', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    const b = allocator.allocate(1000);
    device.pager.pageIn(patternBytes(1000, 1), a);
    const k = device.kernel('k', 500, { reads: [a], writes: [b] }, () => bytesOf(b).set(bytesOf(a)));
    expect(span(k)).to.deep.equal([1100, 1600]);
    expect(bytesOf(b)).to.deep.equal(patternBytes(1000, 1));
  });

  it('overlaps compute with a copy of another block, and waits only where it must', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    const b = allocator.allocate(1000);
    const c = allocator.allocate(1000);
    const copy = device.pager.pageIn(patternBytes(1000, 1), a);
    const k1 = device.kernel('onB', 500, { reads: [b], writes: [c] });
    const k2 = device.kernel('onA', 500, { reads: [a], writes: [c] });
    expect(span(copy)).to.deep.equal([0, 1100]);
    expect(span(k1), 'runs under the copy').to.deep.equal([0, 500]);
    expect(span(k2), 'waits for the copy').to.deep.equal([1100, 1600]);
    expect(device.stats).to.deep.equal({
      nowNs: 0,
      makespanNs: 1600,
      compute: { operations: 2, busyNs: 1000, idleNs: 600, bytes: 0 },
      h2d: { operations: 1, busyNs: 1100, idleNs: 0, bytes: 1000 },
      d2h: { operations: 0, busyNs: 0, idleNs: 0, bytes: 0 },
    });
    expect(device.idleGaps('compute')).to.deep.equal([{ startNs: 500, endNs: 1100 }]);
  });

  it('runs kernels in order on the one compute engine, reading what the previous one wrote', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(8);
    device.kernel('one', 10, { writes: [a] }, () => bytesOf(a).fill(1));
    device.kernel('two', 20, { reads: [a], writes: [a] }, () => bytesOf(a).forEach((x, i, v) => (v[i] = x + 1)));
    expect(device.timeline.map(span)).to.deep.equal([
      [0, 10],
      [10, 30],
    ]);
    expect([...bytesOf(a)]).to.deep.equal([2, 2, 2, 2, 2, 2, 2, 2]);
  });

  it('starts no earlier than the host clock', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(8);
    expect(device.hostWait(5000)).to.equal(5000);
    expect(device.hostWait(10), 'the clock never goes back').to.equal(5000);
    expect(span(device.kernel('late', 10, { writes: [a] }))).to.deep.equal([5000, 5010]);
    expect(device.stats.compute.idleNs).to.equal(5000);
    expect(device.synchronize()).to.equal(5010);
  });

  it('schedules nothing when run throws, and refuses bad arguments', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(8);
    expect(() =>
      device.kernel('boom', 10, { writes: [a] }, () => {
        throw new Error('boom');
      }),
    ).to.throw('boom');
    expect(device.timeline).to.deep.equal([]);
    expect(() => device.kernel('', 10, {})).to.throw(InvalidArgumentError);
    expect(() => device.kernel('k', 1.5, {})).to.throw(InvalidArgumentError);
    expect(() => device.kernel('k', -1, {})).to.throw(InvalidArgumentError);
    const other = new CachingAllocator(new SimulatedDevice({ device: 'sim:1' }), {}).allocate(8);
    expect(() => device.kernel('k', 1, { reads: [other] })).to.throw(InvalidArgumentError, /sim:1|sim:0/);
    allocator.free(a);
    expect(() => device.kernel('k', 1, { reads: [a] })).to.throw(UseAfterReleaseError);
  });
});

describe('SimulatedDevice (as a MemoryBackend)', () => {
  it('serves a CachingAllocator: allocate, write, read back, free, with the transfers on the timeline', async () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    allocator.writeBytes(a, patternBytes(1000, 5));
    expect(await allocator.readBytes(a)).to.deep.equal(patternBytes(1000, 5));
    expect(device.timeline.map((e) => [e.engine, e.name, e.startNs, e.endNs])).to.deep.equal([
      ['h2d', 'write', 0, 1100],
      ['d2h', 'read', 1100, 2200],
    ]);
    allocator.free(a);
    expect(allocator.memoryStats()['allocated_bytes.all.current']).to.equal(0);
    allocator.emptyCache();
    expect(allocator.reservedBytes).to.equal(0);
  });

  it('reports events complete once the host clock reaches the work before them', () => {
    const { device, allocator } = setup();
    device.pager.pageIn(patternBytes(1000, 1), allocator.allocate(1000));
    const event = device.recordEvent(0);
    expect(device.isEventComplete(event)).to.equal(false);
    device.synchronizeEvent(event);
    expect(device.now).to.equal(1100);
    expect(device.isEventComplete(event)).to.equal(true);
  });
});

describeAllocatorContract('CachingAllocator over a SimulatedDevice', () => new CachingAllocator(new SimulatedDevice(), {}));
