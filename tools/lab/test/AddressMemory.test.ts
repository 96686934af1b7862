import { expect } from 'chai';
import { CachingAllocator, createRuntime, InvalidArgumentError, resolve } from '@stowage/core';
import { describeAllocatorContract, patternBytes } from '@stowage/core/testing';
import { LmsController, lms, pin } from '@stowage/lms';
import type { AddressSegment } from '@stowage/lab';
import { SimulatedDevice, simulated, simulatedDeviceOf, ZeroHostCopy } from '@stowage/lab';

const KiB = 1024;
const MiB = 1 << 20;
const GiB = 2 ** 30;

describeAllocatorContract('CachingAllocator over an address-only SimulatedDevice', () => new CachingAllocator(new SimulatedDevice({ addressOnly: true }), {}));

describeAllocatorContract(
  'CachingAllocator over an address-only SimulatedDevice of 16 GiB',
  () => new CachingAllocator(new SimulatedDevice({ addressOnly: true, capacityBytes: 16 * GiB }), {}),
);

describe('SimulatedDevice (address-only)', () => {
  it('holds no memory for its segments: a 64 GiB segment reads as zeros and stores only the pages written', async () => {
    const device = new SimulatedDevice({ addressOnly: true });
    const segment = device.malloc(64 * GiB)!;
    expect(segment.byteLength).to.equal(64 * GiB);
    const handle = segment.handle as AddressSegment;
    expect(handle.storedPages).to.equal(0);
    device.write(handle, 40 * GiB + 4000, patternBytes(200, 1)); // crosses a 4 KiB page boundary
    expect(handle.storedPages).to.equal(2);
    expect(await device.read(handle, 40 * GiB + 4000, 200)).to.deep.equal(patternBytes(200, 1));
    expect(await device.read(handle, 40 * GiB + 3990, 10)).to.deep.equal(new Uint8Array(10));
    device.free(segment);
  });

  it('hands out aligned, disjoint addresses and returns null past its capacity', () => {
    const device = new SimulatedDevice({ addressOnly: true, capacityBytes: 16 * GiB });
    const a = device.malloc(10 * GiB)!;
    const b = device.malloc(6 * GiB)!;
    expect(a.address % device.alignment).to.equal(0);
    expect(b.address).to.be.at.least(a.address + a.byteLength);
    expect(device.malloc(1)).to.equal(null);
    device.free(a);
    expect(device.malloc(10 * GiB)).to.not.equal(null);
  });

  it('times its copies as the byte-keeping device does', () => {
    const addresses = new SimulatedDevice({ addressOnly: true, link: 'pcie5' });
    const bytes = new SimulatedDevice({ link: 'pcie5' });
    const a = new CachingAllocator(addresses, {}).allocate(3 * MiB);
    const b = new CachingAllocator(bytes, {}).allocate(3 * MiB);
    expect(addresses.pager.pageOut(a).entry).to.deep.equal(bytes.pager.pageOut(b).entry);
  });

  it('pages a block never written out as a ZeroHostCopy of its length that holds nothing, and back', async () => {
    const device = new SimulatedDevice({ addressOnly: true });
    const allocator = new CachingAllocator(device, {});
    const ptr = allocator.allocate(5 * GiB);
    const out = device.pager.pageOut(ptr);
    expect(out.bytes).to.be.instanceOf(ZeroHostCopy);
    expect(out.bytes.byteLength).to.equal(5 * GiB);
    expect(out.bytes.length, 'no elements: no memory').to.equal(0);
    expect(out.bytes.slice(10, 20)).to.deep.equal(new Uint8Array(10));
    const back = allocator.allocate(5 * GiB);
    device.write(back.handle as AddressSegment, 0, patternBytes(64, 3));
    device.pager.pageIn(out.bytes, back);
    expect(await allocator.readBytes(back, 0, 64), 'the page-in made the block zeros again').to.deep.equal(new Uint8Array(64));
  });

  it('pages written bytes out and back under LMS, through a runtime', async () => {
    await using rt = await createRuntime({ plugins: [simulated({ addressOnly: true, limit: 3 * MiB, segmentSize: (rounded) => rounded }), lms({ devices: ['sim'] })] });
    const storages = [0, 1, 2, 3, 4].map((seed) => {
      const s = rt.storage(MiB, { device: 'sim' });
      rt.write(s, patternBytes(MiB, seed));
      pin(s).release();
      return s;
    });
    resolve(rt.container, LmsController).endIteration();
    for (const [seed, s] of storages.entries()) {
      using _ = pin(s);
      expect(Buffer.from(await rt.read(s)).equals(Buffer.from(patternBytes(MiB, seed))), `storage ${seed}'s bytes`).to.equal(true);
    }
    expect((rt.allocator('sim').memoryStats() as Readonly<Record<string, number>>)['page_in']).to.be.greaterThan(0);
    expect(simulatedDeviceOf(rt)!.addressOnly).to.equal(true);
  });

  it('runs a 100 GiB working set through a 16 GiB budget under LMS, holding none of it', async () => {
    const budgetBytes = 16 * GiB;
    await using rt = await createRuntime({ plugins: [simulated({ addressOnly: true, link: 'pcie4', limit: budgetBytes, segmentSize: (rounded) => rounded }), lms({ devices: ['sim'] })] });
    const rssBefore = process.memoryUsage().rss;
    const storages = Array.from({ length: 100 }, () => {
      const s = rt.storage(GiB, { device: 'sim' });
      pin(s).release();
      return s;
    });
    for (const s of storages) pin(s).release();
    const stats: Readonly<Record<string, number>> = rt.allocator('sim').memoryStats();
    expect(stats['reserved_bytes.all.peak']).to.be.at.most(budgetBytes);
    expect(stats['page_out_bytes']).to.be.at.least(84 * GiB);
    expect(stats['page_in_bytes']).to.be.at.least(84 * GiB);
    expect(process.memoryUsage().rss - rssBefore, 'bytes the run held on this machine').to.be.below(256 * MiB);
    const device = simulatedDeviceOf(rt)!;
    expect(device.stats.d2h.bytes).to.equal(stats['page_out_bytes']);
    for (const s of storages) s.release();
  });

  it('refuses an addressOnly that is not a boolean', () => {
    expect(() => new SimulatedDevice({ addressOnly: 'yes' as never })).to.throw(InvalidArgumentError, /addressOnly/);
    expect(() => simulated({ addressOnly: 1 as never })).to.throw(InvalidArgumentError, /addressOnly/);
  });

  it('keeps a copy between segments, and clears the destination when the source holds nothing', async () => {
    const device = new SimulatedDevice({ addressOnly: true });
    const src = device.malloc(64 * KiB)!.handle as AddressSegment;
    const dst = device.malloc(64 * KiB)!.handle as AddressSegment;
    device.write(src, 100, patternBytes(300, 4));
    device.copy(dst, 1000, src, 100, 300);
    expect(await device.read(dst, 1000, 300)).to.deep.equal(patternBytes(300, 4));
    device.copy(dst, 1000, src, 10 * KiB, 300);
    expect(await device.read(dst, 1000, 300)).to.deep.equal(new Uint8Array(300));
  });
});
