import { expect } from 'chai';
import fc from 'fast-check';
import type { DataPtr } from '@stowage/core';
import type { HostBuffer } from '@stowage/core/plugin-kit';
import { CachingAllocator, cpu, createRuntime, InvalidArgumentError, OutOfMemoryError, resolve, UseAfterReleaseError } from '@stowage/core';
import { describeAllocatorContract, patternBytes } from '@stowage/core/testing';
import type { EngineName, LinkProfile, SimulatedHandle, TimelineEntry } from '@stowage/lab';
import { LmsController, LmsAllocator, lms, pin } from '@stowage/lms';
import { copyDurationNs, createSimulatedAllocator, LINK_PROFILES, SimulatedDevice, simulated, simulatedDeviceOf } from '@stowage/lab';

const MiB = 1 << 20;

/** 1 byte per nanosecond plus 100 ns a copy: a 1000-byte copy takes 1100 ns, easy to add up by hand. */
const ONE_BYTE_PER_NS: LinkProfile = { bytesPerSecond: 1e9, latencyNs: 100 };

/** A device on the hand-checkable link and an allocator over it. */
function setup(link: LinkProfile = ONE_BYTE_PER_NS): { device: SimulatedDevice; allocator: CachingAllocator<SimulatedHandle> } {
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
    expect(new SimulatedDevice({ link: 'pcie3' }).link, 'PCIe 3.0 x16').to.deep.equal({ bytesPerSecond: 16e9, latencyNs: 2000 });
    expect(new SimulatedDevice({ link: 'nvlink2' }).link, "NVLink 2.0 to a POWER9: the AC922's 150 GB/s both ways, halved").to.deep.equal({ bytesPerSecond: 75e9, latencyNs: 1000 });
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

  it('waits on the host, when a segment is given back, for the page-out still reading it, so no later work overlaps it', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1000);
    const out = device.pager.pageOut(a);
    expect(span(out.entry)).to.deep.equal([0, 1100]);
    allocator.free(a);
    allocator.emptyCache();
    expect(device.now, 'freeing the segment waited for the copy').to.equal(1100);
    const b = allocator.allocate(1000);
    expect(span(device.kernel('write', 200, { writes: [b] })), 'the new segment is written after the copy').to.deep.equal([1100, 1300]);
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

  it('keeps the hazard of a write on the bytes a later, partial write leaves alone', () => {
    const { device, allocator } = setup();
    const a = allocator.allocate(1024);
    device.kernel('fill', 5000, { writes: [a] });
    expect(span(device.pager.pageIn(new Uint8Array(100), a)), 'the first 100 bytes, after fill').to.deep.equal([5000, 5200]);
    allocator.free(a);
    const head = allocator.allocate(512);
    const tail = allocator.allocate(512);
    expect([head.byteOffset, tail.byteOffset]).to.deep.equal([a.byteOffset, a.byteOffset + 512]);
    expect(span(device.pager.pageOut(tail).entry), 'bytes fill wrote and the page-in did not').to.deep.equal([5000, 5000 + 612]);
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
    expect(() => device.kernel('k', 1, { reads: a } as never)).to.throw(InvalidArgumentError, /access\.reads/);
    expect(() => device.kernel('k', 1, { writes: [{}] } as never)).to.throw(InvalidArgumentError, /access\.writes\[0\]/);
    expect(() => device.kernel('k', 1, { read: [a] } as never)).to.throw(InvalidArgumentError);
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

/** Bytes `[lo, hi)` of one segment. */
interface Span {
  readonly handle: unknown;
  readonly lo: number;
  readonly hi: number;
}

/** The first `byteLength` bytes of `ptr` (all of them by default). */
function spanOf(ptr: DataPtr, byteLength = ptr.byteLength): Span {
  return { handle: ptr.handle, lo: ptr.byteOffset, hi: ptr.byteOffset + byteLength };
}

/** The schedule's definition written out naively, a scan of every access ever made, to check the device's pruned bookkeeping. */
class ReferenceScheduler {
  readonly #accesses: (Span & { write: boolean; endNs: number })[] = [];
  readonly #freeAtNs: Record<EngineName, number> = { compute: 0, h2d: 0, d2h: 0 };
  nowNs = 0;

  schedule(engine: EngineName, durationNs: number, reads: readonly Span[], writes: readonly Span[], afterNs = 0): [number, number] {
    const overlap = (a: Span, b: Span): boolean => a.handle === b.handle && a.lo < b.hi && b.lo < a.hi;
    let startNs = Math.max(this.nowNs, this.#freeAtNs[engine], afterNs);
    for (const a of this.#accesses) {
      if (writes.some((w) => overlap(w, a)) || (a.write && reads.some((r) => overlap(r, a)))) startNs = Math.max(startNs, a.endNs);
    }
    const endNs = startNs + durationNs;
    this.#freeAtNs[engine] = endNs;
    for (const r of reads) this.#accesses.push({ ...r, write: false, endNs });
    for (const w of writes) this.#accesses.push({ ...w, write: true, endNs });
    return [startNs, endNs];
  }
}

type Step =
  | { readonly op: 'alloc'; readonly bytes: number }
  | { readonly op: 'free' | 'pageOut' | 'pageBack'; readonly at: number }
  | { readonly op: 'pageIn'; readonly at: number; readonly fraction: number }
  | { readonly op: 'kernel'; readonly reads: number[]; readonly writes: number[]; readonly durationNs: number }
  | { readonly op: 'wait'; readonly fraction: number };

const STEP: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ op: fc.constant('alloc' as const), bytes: fc.integer({ min: 1, max: 3000 }) }),
  fc.record({ op: fc.constantFrom('free' as const, 'pageOut' as const, 'pageBack' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('pageIn' as const), at: fc.nat(), fraction: fc.double({ min: 0, max: 1, noNaN: true }) }),
  fc.record({
    op: fc.constant('kernel' as const),
    reads: fc.array(fc.nat(), { maxLength: 3 }),
    writes: fc.array(fc.nat(), { maxLength: 2 }),
    durationNs: fc.integer({ min: 0, max: 5000 }),
  }),
  fc.record({ op: fc.constant('wait' as const), fraction: fc.double({ min: 0, max: 1, noNaN: true }) }),
);

describe('SimulatedDevice (schedule)', () => {
  it('starts every operation where a scan of all earlier operations says, under random allocs, frees, kernels, copies and waits', () => {
    fc.assert(
      fc.property(fc.array(STEP, { maxLength: 120 }), (steps) => {
        const { device, allocator } = setup();
        const reference = new ReferenceScheduler();
        const live: DataPtr[] = [];
        const hostCopies: { bytes: Uint8Array; onHostAtNs: number }[] = [];
        const pick = (i: number): DataPtr | undefined => live[i % Math.max(live.length, 1)];
        for (const step of steps) {
          let actual: TimelineEntry;
          let expected: [number, number];
          if (step.op === 'alloc') {
            live.push(allocator.allocate(step.bytes)); // freed blocks come back split and merged: spans overlap old ones
            continue;
          } else if (step.op === 'wait') {
            reference.nowNs = device.hostWait(Math.floor(step.fraction * device.stats.makespanNs));
            continue;
          } else if (step.op === 'kernel') {
            const reads = step.reads.map(pick).filter((p) => p !== undefined);
            const writes = step.writes.map(pick).filter((p) => p !== undefined);
            actual = device.kernel('k', step.durationNs, { reads, writes });
            expected = reference.schedule('compute', step.durationNs, reads.map((p) => spanOf(p)), writes.map((p) => spanOf(p)));
          } else {
            const ptr = pick(step.at);
            if (ptr === undefined) continue;
            if (step.op === 'free') {
              live.splice(live.indexOf(ptr), 1);
              allocator.free(ptr);
              continue;
            } else if (step.op === 'pageOut') {
              const out = device.pager.pageOut(ptr);
              actual = out.entry;
              expected = reference.schedule('d2h', device.copyDurationNs(ptr.byteLength), [spanOf(ptr)], []);
              hostCopies.push({ bytes: out.bytes, onHostAtNs: expected[1] });
            } else {
              const copy = step.op === 'pageBack' ? hostCopies.find((c) => c.bytes.byteLength <= ptr.byteLength) : undefined;
              const bytes = copy?.bytes ?? new Uint8Array(Math.ceil((step.op === 'pageIn' ? step.fraction : 1) * ptr.byteLength)); // a prefix: spans overlap in part
              actual = device.pager.pageIn(bytes, ptr);
              expected = reference.schedule('h2d', device.copyDurationNs(bytes.byteLength), [], [spanOf(ptr, bytes.byteLength)], copy?.onHostAtNs ?? 0);
            }
          }
          expect(span(actual), `${step.op}, operation ${device.timeline.length}`).to.deep.equal(expected);
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe('SimulatedDevice (under LMS)', () => {
  it('pages storages out and back in through its pager under a budget, on the schedule worked out by hand', async () => {
    await using rt = await createRuntime({ plugins: [cpu(), simulated({ link: 'pcie4', limit: 24 * MiB }), lms({ devices: ['sim'] })] });
    const device = simulatedDeviceOf(rt)!;
    const storages = [0, 1, 2].map((seed) => {
      const s = rt.storage(10 * MiB, { device: 'sim' }); // a segment of its own: two fit under the budget, not three
      rt.write(s, patternBytes(s.byteLength, seed));
      pin(s).release();
      return s;
    });
    expect(storages.map((s) => s.lms?.state)).to.deep.equal(['reclaimed', 'inactive', 'inactive']);
    for (const [seed, s] of storages.entries()) {
      pin(s).release();
      expect(Buffer.from(await rt.read(s)).equals(Buffer.from(patternBytes(s.byteLength, seed))), `storage ${seed}'s bytes`).to.equal(true);
    }
    const d = copyDurationNs(LINK_PROFILES.pcie4, 10 * MiB); // every copy here moves 10 MiB: 2000 + 327 680 ns
    expect(device.timeline.map((e) => `${e.engine} ${e.name} ${e.startNs / d}-${e.endNs / d}`)).to.deep.equal([
      'h2d write 0-1', // s0
      'h2d write 1-2', // s1, after s0's on the one h2d engine
      'd2h pageOut 1-2', // s2 needs room: s0 goes out once its write has ended
      'h2d write 2-3', // s2 into s0's old block: after the page-out has read it
      'd2h pageOut 2-3', // pin(s0) needs room: s1 goes out (least recently unpinned)
      'h2d pageIn 3-4', // s0 into s1's old block: after s1's page-out (and s0's bytes reached the host at 2)
      'd2h read 4-5', // rt.read(s0), after its page-in
      'd2h pageOut 5-6', // pin(s1): s2 goes out, behind the read on the d2h engine
      'h2d pageIn 6-7',
      'd2h read 7-8',
      'h2d pageIn 7-8', // pin(s2): s0 is freed without a copy (its host copy is still valid), s2 comes in
      'd2h read 8-9',
    ]);
    expect(device.stats.makespanNs).to.equal(9 * d);
  });
});

describe('simulated (the sim device plugin)', () => {
  it('makes a caching allocator over a SimulatedDevice of its link, which lms() wraps and simulatedDeviceOf finds', async () => {
    await using rt = await createRuntime({ plugins: [cpu(), simulated({ link: 'pcie5' }), lms({ devices: ['sim'] })] });
    const allocator = rt.allocator('sim');
    expect(allocator).to.be.instanceOf(LmsAllocator);
    const device = simulatedDeviceOf(rt);
    expect(device).to.be.instanceOf(SimulatedDevice);
    expect(device!.link).to.equal(LINK_PROFILES.pcie5);
    expect(device!.device).to.deep.equal({ type: 'sim', index: 0 });
    const s = rt.storage(1000, { device: 'sim' });
    expect(s.lms?.state, 'the storage has an LMS object').to.equal('allocated');
    expect(simulatedDeviceOf(rt, 'cpu'), 'the CPU device has none').to.equal(undefined);
    await using other = await createRuntime({ plugins: [simulated()] });
    expect(simulatedDeviceOf(other), 'each runtime has its own device').to.not.equal(device);
    expect(simulatedDeviceOf(other)!.link, 'pcie4 by default').to.equal(LINK_PROFILES.pcie4);
  });

  it('refuses bad options at once with an InvalidArgumentError naming the option', () => {
    expect(() => simulated({ link: 'pcie6' as 'pcie5' })).to.throw(InvalidArgumentError, /options\.link/);
    expect(() => simulated({ link: { bytesPerSecond: 1.5, latencyNs: 0 } })).to.throw(InvalidArgumentError, /options\.link\.bytesPerSecond/);
    expect(() => simulated({ memoryBytesPerSecond: 0 })).to.throw(InvalidArgumentError, /options\.memoryBytesPerSecond/);
    expect(() => simulated({ capacityBytes: -1 })).to.throw(InvalidArgumentError, /options\.capacityBytes/);
    expect(() => simulated({ limit: 'lots' })).to.throw(InvalidArgumentError, /options\.limit/);
    expect(() => simulated({ limit: { fraction: 0.5 } }), 'no capacity to take a fraction of').to.throw(InvalidArgumentError, /options\.limit/);
    expect(() => simulated({ lnk: 'pcie4' } as never)).to.throw(InvalidArgumentError, /lnk/);
    expect(() => simulated({ reclaimers: [] } as never)).to.throw(InvalidArgumentError, /options\.reclaimers/);
    expect(() => simulated({ segmentSize: 'big' } as never), 'an engine option is checked too').to.throw(InvalidArgumentError, /segmentSize/);
  });

  it('keeps reserved bytes within its limit: past it, without LMS, an allocation is an OutOfMemoryError', async () => {
    await using rt = await createRuntime({ plugins: [simulated({ limit: 3 * MiB, segmentSize: (rounded) => rounded })] });
    const held = [0, 1, 2].map(() => rt.storage(MiB, { device: 'sim' }));
    expect(() => rt.storage(MiB, { device: 'sim' })).to.throw(OutOfMemoryError);
    expect(rt.allocator('sim').memoryStats()['reserved_bytes.all.peak']).to.equal(3 * MiB);
    for (const s of held) s.release();
  });

  it('takes a limit of { fraction } of capacityBytes', () => {
    const allocator = createSimulatedAllocator({ capacityBytes: 8 * MiB, limit: { fraction: 0.25 }, segmentSize: (rounded) => rounded });
    const a = allocator.allocate(2 * MiB);
    expect(() => allocator.allocate(MiB)).to.throw(OutOfMemoryError);
    allocator.free(a);
    expect(simulatedDeviceOf(allocator)!.capacityBytes).to.equal(8 * MiB);
  });

  it('lets LMS page through it under a budget: every byte comes back, the copies on the timeline, reserved within the budget', async () => {
    const budgetBytes = 3 * MiB;
    await using rt = await createRuntime({ plugins: [simulated({ limit: budgetBytes, segmentSize: (rounded) => rounded }), lms({ devices: ['sim'] })] });
    const allocator = rt.allocator('sim');
    const device = simulatedDeviceOf(rt)!;
    const storages = [0, 1, 2, 3, 4, 5].map((seed) => {
      const s = rt.storage(MiB, { device: 'sim' });
      rt.write(s, patternBytes(MiB, seed));
      pin(s).release();
      return s;
    });
    resolve(rt.container, LmsController).endIteration();
    for (const [seed, s] of storages.entries()) {
      using guard = pin(s);
      expect(guard.isHeld).to.equal(true);
      expect(Buffer.from(await rt.read(s)).equals(Buffer.from(patternBytes(MiB, seed))), `storage ${seed}'s bytes`).to.equal(true);
    }
    const stats: Readonly<Record<string, number>> = allocator.memoryStats(); // with LMS's keys
    expect(stats['page_out']).to.be.greaterThan(0);
    expect(stats['page_in']).to.be.greaterThan(0);
    expect(stats['reserved_bytes.all.peak']).to.be.at.most(budgetBytes);
    const copies = (name: string): number => device.timeline.filter((e) => e.name === name).reduce((sum, e) => sum + e.bytes!, 0);
    expect(copies('pageOut')).to.equal(stats['page_out_bytes']);
    expect(copies('pageIn')).to.equal(stats['page_in_bytes']);
    expect(device.stats.d2h.bytes).to.equal(copies('pageOut') + copies('read'));
  });
});

describeAllocatorContract('CachingAllocator over a SimulatedDevice', () => new CachingAllocator(new SimulatedDevice(), {}));
