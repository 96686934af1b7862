import { expect } from 'chai';
import type { AllocatorStats, ForwardingAllocator, Runtime, StorageImpl } from '@stowage/core';
import { createRuntime, resolve } from '@stowage/core';
import type { WebGpuAllocator, WebGpuContext, WebGpuMemoryBackend } from '@stowage/allocator-webgpu';
import { webgpu } from '@stowage/allocator-webgpu';
import { DeviceMemoryCounter, deviceOrSkip as sharedDeviceOrSkip, ownDeviceOrSkip, refuseSegments } from '@stowage/lab/browser';
import { LmsController, lms, StorageResidency, PageInPendingError, pin, pinAsync } from '@stowage/lms';
import { patternBytes } from '@stowage/core/testing';

const MiB = 1 << 20;
/**
 * The device's budget covers segments and page-out staging (Note [One budget] in @stowage/allocator-webgpu): 4 MiB
 * are kept for the staging of page-outs in flight (these tests page out up to four 1 MiB storages in one
 * synchronous run, before any copy lands), and segments get the other 4 MiB. The allocator reserves 2 MiB segments
 * there (at least 2 MiB: Note [WebGPU segment sizing]), each holding two 1 MiB storages: four fit, a fifth
 * reclaims one.
 */
const SEGMENT_BUDGET = 4 * MiB;
const PAGING_RESERVE = 4 * MiB;
const BUDGET = SEGMENT_BUDGET + PAGING_RESERVE;
/** What the device may hold beyond the budget at any moment: max(1 MiB, 2 % of the budget). */
const SLACK = Math.max(MiB, 0.02 * BUDGET);
const STORAGE_BYTES = MiB;

function lmsOf(storage: StorageImpl): StorageResidency {
  expect(storage.lms).to.be.instanceOf(StorageResidency);
  return storage.lms as StorageResidency;
}

function stats(rt: Runtime): AllocatorStats & Record<string, number> {
  return rt.allocator('webgpu').memoryStats() as AllocatorStats & Record<string, number>;
}

/** One statistic of the WebGPU allocator, which must exist. */
function stat(rt: Runtime, key: string): number {
  const value = stats(rt)[key];
  expect(value, key).to.be.a('number');
  return value!;
}

async function expectBytes(rt: Runtime, storage: StorageImpl, seed: number): Promise<void> {
  const bytes = await rt.read(storage);
  expect(Buffer.from(bytes).equals(Buffer.from(patternBytes(storage.byteLength, seed))), `bytes of storage ${seed}`).to.equal(true);
}

describe('LMS on WebGPU', function () {
  this.timeout(60_000);
  async function deviceOrSkip(test: Mocha.Context): Promise<GPUDevice> {
    return (await sharedDeviceOrSkip(test)).device;
  }

  /** A runtime whose WebGPU allocator has the test budget, under LMS. */
  async function lmsRuntime(test: Mocha.Context): Promise<Runtime> {
    const device = await deviceOrSkip(test);
    return createRuntime({ plugins: [webgpu({ device, limit: BUDGET, pagingReserve: PAGING_RESERVE }), lms()] });
  }

  /** A WebGPU storage filled with `seed`'s bytes, pinned once and let go (inactive: it may be reclaimed). */
  function inactiveStorage(rt: Runtime, seed: number, bytes = STORAGE_BYTES): StorageImpl {
    const storage = rt.storage(bytes, { device: 'webgpu' });
    rt.write(storage, patternBytes(bytes, seed));
    pin(storage).release();
    return storage;
  }

  /** A storage whose page-out was just enqueued: reclaimed, its bytes not yet on the host. */
  function reclaimedInFlight(rt: Runtime, seed: number): StorageImpl {
    const storage = inactiveStorage(rt, seed);
    resolve(rt.container, LmsController).reclaimInactive({ type: 'webgpu', index: 0 });
    expect([lmsOf(storage).state, lmsOf(storage).hostCopyReady]).to.deep.equal(['reclaimed', false]);
    return storage;
  }

  it('reclaims under the budget and keeps every byte through page-out and page-in', async function () {
    await using rt = await lmsRuntime(this);
    const storages = Array.from({ length: 8 }, (_, seed) => {
      const storage = inactiveStorage(rt, seed);
      expect(stats(rt)['reserved_bytes.all.current']).to.be.at.most(SEGMENT_BUDGET);
      return storage;
    });
    const s = stats(rt);
    expect(s.reclaimed, 'four do not fit beside the four newest').to.equal(4);
    expect(s['alloc_distribution.reclaim_one']).to.equal(4);
    expect(storages.map((storage) => storage.lms!.state)).to.deep.equal([...Array(4).fill('reclaimed'), ...Array(4).fill('inactive')]);
    // Each pin brings one back, reclaiming another in turn (its page-out in flight while the next waits).
    for (const [seed, storage] of storages.entries()) {
      using _guard = await pinAsync(storage);
      expect(storage.lms!.state).to.equal('active');
      await expectBytes(rt, storage, seed);
      expect(stats(rt)['reserved_bytes.all.current']).to.be.at.most(SEGMENT_BUDGET);
    }
    for (const [seed, storage] of storages.entries()) await expectBytes(rt, storage, seed);
    const after = stats(rt);
    expect(after.page_in).to.be.at.least(8);
    expect(after['reserved_bytes.all.peak'], 'never over the budget, not even within an allocation').to.be.at.most(SEGMENT_BUDGET);
  });

  it('releases whole segments for a request that needs a new one (reclaim_all), and keeps every byte', async function () {
    await using rt = await lmsRuntime(this);
    const storages = [0, 1, 2, 3].map((seed) => inactiveStorage(rt, seed));
    const large = rt.storage(3 * MiB, { device: 'webgpu' }); // a segment of its own: both 2 MiB segments must go
    rt.write(large, patternBytes(3 * MiB, 9));
    const s = stats(rt);
    expect(s['alloc_distribution.reclaim_all']).to.equal(1);
    expect(s['reserved_bytes.all.peak']).to.be.at.most(SEGMENT_BUDGET);
    expect(storages.map((storage) => storage.lms!.state)).to.deep.equal(Array(4).fill('reclaimed'));
    await expectBytes(rt, large, 9);
    large.release();
    for (const [seed, storage] of storages.entries()) await expectBytes(rt, storage, seed);
  });

  it('refuses a synchronous pin, data() or write of a storage whose page-out is in flight with PageInPendingError, changing nothing; pinAsync waits and pins it', async function () {
    await using rt = await lmsRuntime(this);
    const storage = reclaimedInFlight(rt, 2);
    const resident = inactiveStorage(rt, 1);
    const before = stats(rt);
    const pageIns = stat(rt, 'page_in');
    const attempts = [() => pin(storage), () => pin(resident, storage), () => storage.data(), () => rt.write(storage, patternBytes(16, 0))];
    for (const attempt of attempts) {
      let error: unknown;
      try {
        attempt();
      } catch (e) {
        error = e;
      }
      expect(error).to.be.instanceOf(PageInPendingError);
      expect((error as PageInPendingError).code).to.equal('PAGE_IN_PENDING');
      expect([lmsOf(storage).state, lmsOf(storage).pinCount, lmsOf(resident).state, lmsOf(resident).pinCount]).to.deep.equal(['reclaimed', 0, 'inactive', 0]);
    }
    const unchanged = stats(rt);
    for (const key of ['pinned.all.current', 'pinned_bytes.all.current', 'page_in', 'page_out', 'allocated_bytes.all.current', 'host_bytes.all.current']) {
      expect(unchanged[key], key).to.equal(before[key]);
    }
    {
      using _guard = await pinAsync(resident, storage);
      expect([storage.lms!.state, resident.lms!.state]).to.deep.equal(['active', 'active']);
      expect(stat(rt, 'page_in')).to.equal(pageIns + 1);
      await expectBytes(rt, storage, 2);
    }
    expect(storage.lms!.state).to.equal('inactive');
    await expectBytes(rt, resident, 1);
  });

  it('gives the staging buffer of a page-out in flight back at once when its storage is released or rewritten', async function () {
    await using rt = await lmsRuntime(this);
    const released = reclaimedInFlight(rt, 1);
    const staging = stat(rt, 'staging_bytes.current');
    expect(staging - stat(rt, 'staging_bytes.pooled'), 'the page-out holds its staging buffer').to.be.at.least(STORAGE_BYTES);
    released.release();
    expect(stat(rt, 'staging_bytes.current'), 'released: its copy is cancelled').to.equal(staging - STORAGE_BYTES);
    const rewritten = inactiveStorage(rt, 2);
    expect(lmsOf(rewritten).pageOutEarly(), 'a speculative page-out').to.equal(true);
    const inFlight = stat(rt, 'staging_bytes.current');
    rt.write(rewritten, patternBytes(STORAGE_BYTES, 3)); // the copy in flight is stale now
    expect(stat(rt, 'staging_bytes.current'), 'rewritten: its copy is cancelled').to.equal(inFlight - STORAGE_BYTES);
    await lmsOf(rewritten).hostCopySettled();
    expect(lmsOf(rewritten).hostCopyReady).to.equal(false);
    await expectBytes(rt, rewritten, 3);
  });

  it('waits in rt.read for a storage whose page-out is in flight and returns its bytes from the host copy, leaving it reclaimed', async function () {
    await using rt = await lmsRuntime(this);
    const storage = reclaimedInFlight(rt, 3);
    const pageIns = stat(rt, 'page_in');
    await expectBytes(rt, storage, 3);
    expect(storage.lms!.state, 'a read does not bring it back').to.equal('reclaimed');
    expect(stat(rt, 'page_in')).to.equal(pageIns);
    expect(lmsOf(storage).hasHostCopy).to.equal(true);
  });

  it('resolves hostCopySettled once an early page-out of a resident storage landed, so that a reclaim then copies nothing and a synchronous pin brings it back', async function () {
    await using rt = await lmsRuntime(this);
    const storage = inactiveStorage(rt, 5);
    const lms = lmsOf(storage);
    await lms.hostCopySettled(); // no copy in flight: at once
    lms.pageOutEarly();
    expect([lms.state, lms.hasHostCopy, lms.hostCopyReady]).to.deep.equal(['inactive', true, false]);
    await lms.hostCopySettled();
    expect(lms.hostCopyReady).to.equal(true);
    const pageOuts = stat(rt, 'page_out');
    resolve(rt.container, LmsController).reclaimInactive({ type: 'webgpu', index: 0 });
    expect([lms.state, stat(rt, 'page_out')]).to.deep.equal(['reclaimed', pageOuts]);
    pin(storage).release(); // synchronous: the bytes are on the host
    await expectBytes(rt, storage, 5);
  });

  it('pins a reclaimed storage synchronously once its host copy is complete, and again after a reclaim that copied nothing; a write makes the copy stale', async function () {
    await using rt = await lmsRuntime(this);
    const controller = resolve(rt.container, LmsController);
    const storage = reclaimedInFlight(rt, 4);
    await storage.lms!.ready();
    expect(lmsOf(storage).hostCopyReady).to.equal(true);
    pin(storage).release();
    controller.reclaimInactive();
    expect([storage.lms!.state, lmsOf(storage).hostCopyReady, stats(rt).page_out], 'reclaimed again: the clean copy served, nothing copied').to.deep.equal(['reclaimed', true, 1]);
    {
      using _guard = pin(storage);
      expect(storage.lms!.state).to.equal('active');
    }
    await expectBytes(rt, storage, 4);
    rt.write(storage, patternBytes(STORAGE_BYTES, 5));
    controller.reclaimInactive();
    expect([lmsOf(storage).hostCopyReady, stats(rt).page_out], 'a written storage is paged out again').to.deep.equal([false, 2]);
    expect(() => pin(storage)).to.throw(PageInPendingError);
    await expectBytes(rt, storage, 5);
  });

  it('never reserves more than the budget while storages are pinned, brought back and released', async function () {
    await using rt = await lmsRuntime(this);
    const sizes = [MiB, MiB / 2, MiB / 4, MiB, 3 * MiB / 4, MiB / 2, MiB, MiB / 4, MiB, MiB / 2];
    const storages = sizes.map((bytes, seed) => {
      const storage = inactiveStorage(rt, seed, bytes);
      expect(stats(rt)['reserved_bytes.all.current']).to.be.at.most(SEGMENT_BUDGET);
      return storage;
    });
    // Operations of two inputs each, while one storage stays pinned throughout.
    using _held = pin(storages[9]!);
    for (let i = 0; i + 1 < storages.length - 1; i++) {
      using _guard = await pinAsync(storages[i]!, storages[i + 1]!);
      expect(stats(rt)['reserved_bytes.all.current']).to.be.at.most(SEGMENT_BUDGET);
    }
    storages[0]!.release();
    storages[3]!.release();
    for (const [seed, storage] of storages.entries()) if (!storage.isReleased) await expectBytes(rt, storage, seed);
    const s = stats(rt);
    expect(s.reclaimed).to.be.above(0);
    expect(s['reserved_bytes.all.peak']).to.be.at.most(SEGMENT_BUDGET);
  });

  it('counts the time spent waiting for a page-out in transfer_wait_ms, and pinAsync its turn of the event loop that landed one in transfer_poll_ms', async function () {
    await using rt = await lmsRuntime(this);
    const storage = reclaimedInFlight(rt, 6);
    const before = stat(rt, 'transfer_wait_ms');
    await storage.lms!.ready();
    const waited = stat(rt, 'transfer_wait_ms');
    expect(waited).to.be.above(before);
    await storage.lms!.ready(); // the bytes are here: no wait, nothing counted
    expect(stat(rt, 'transfer_wait_ms')).to.equal(waited);
    const again = reclaimedInFlight(rt, 7);
    const polled = stat(rt, 'transfer_poll_ms');
    using _guard = await pinAsync(again);
    expect(stat(rt, 'transfer_wait_ms') + stat(rt, 'transfer_poll_ms')).to.be.above(waited + polled);
  });

  it('pins a reclaimed storage whose host copy landed without waiting, while another page-out whose room it does not need is in flight', async function () {
    await using rt = await lmsRuntime(this);
    const landed = reclaimedInFlight(rt, 8);
    await lmsOf(landed).hostCopySettled();
    const inFlight = reclaimedInFlight(rt, 9);
    const waited = stat(rt, 'transfer_wait_ms');
    {
      using _guard = await pinAsync(landed);
      expect(lmsOf(landed).state).to.equal('active');
      expect(stat(rt, 'transfer_wait_ms'), 'waited').to.equal(waited);
      expect(stat(rt, 'room_wait_ms'), 'waited for room').to.equal(0);
    }
    await expectBytes(rt, landed, 8);
    await expectBytes(rt, inFlight, 9);
  });

  it('holds at most the budget on the device, counted at the device, while storages are written, reclaimed and brought back again and again', async function () {
    const device = await deviceOrSkip(this);
    const counter = new DeviceMemoryCounter(device).install();
    try {
      // The default paging reserve (a quarter of the budget): segments get 6 MiB, page-out staging the rest.
      await using rt = await createRuntime({ plugins: [webgpu({ device, limit: BUDGET }), lms()] });
      const sizes = [MiB, MiB / 2, MiB / 4, MiB, 3 * MiB / 4, MiB / 2, MiB, MiB / 4, MiB, MiB / 2, 3 * MiB / 4, MiB, MiB / 4, MiB, MiB / 2, MiB];
      const seeds = sizes.map((_, k) => k);
      const within = (what: string): void => {
        expect(counter.liveBytes, `bytes on the device ${what}`).to.be.at.most(BUDGET + SLACK);
        expect(stat(rt, 'device_bytes.current'), `device_bytes.current ${what}`).to.be.at.most(BUDGET + 16); // the kernel's params
      };
      // Made in synchronous runs of three: past the first few, each reclaims a written storage whose copy is still
      // in flight; a run's copies must fit the reserve, so the program lets them land between runs.
      const storages: StorageImpl[] = [];
      for (const [k, bytes] of sizes.entries()) {
        if (k % 3 === 0 && k > 0) await lmsOf(storages[0]!).lmsDevice.settlePageOuts();
        storages.push(inactiveStorage(rt, k, bytes));
        within(`after making storage ${k}`);
      }
      for (let round = 1; round <= 4; round++) {
        for (const [k, storage] of storages.entries()) {
          if ((k + round) % 3 === 0) continue; // some stay reclaimed (or inactive) through a round
          {
            using _op = await pinAsync(storage);
            within(`after pinning storage ${k} in round ${round}`);
            seeds[k] = 100 * round + k;
            rt.write(storage, patternBytes(storage.byteLength, seeds[k]!)); // written: its next reclaim copies again
          }
          within(`after writing storage ${k} in round ${round}`);
        }
      }
      for (const [k, storage] of storages.entries()) {
        await expectBytes(rt, storage, seeds[k]!);
        within(`after reading storage ${k}`);
      }
      const s = stats(rt);
      expect(s.page_out, 'paged heavily').to.be.at.least(2 * sizes.length);
      expect(s.page_in).to.be.at.least(sizes.length);
      expect(s['staging_bytes.peak'], 'page-outs went through staging').to.be.above(0);
      expect(s['device_bytes.peak']).to.be.at.most(BUDGET + 16);
      expect(s['reserved_bytes.all.peak']).to.be.at.most(BUDGET - 2 * MiB);
      expect(s.paging_reserve_bytes).to.equal(BUDGET / 4);
      expect(s.reads_over_budget).to.equal(0);
      expect(counter.peakBytes, 'the most the device held at once').to.be.at.most(BUDGET + SLACK);
      expect(counter.liveBytes, 'what Stowage counts is what the device holds').to.equal(s['device_bytes.current']);
    } finally {
      counter.uninstall();
    }
  });

  it('learns a loop: reclaims find speculative page-outs, prefetch brings storages back ahead of their pins, and every byte is kept', async function () {
    const device = await deviceOrSkip(this);
    // One segment per allocation: six 1 MiB storages, four fit.
    await using rt = await createRuntime({ plugins: [webgpu({ device, limit: BUDGET, pagingReserve: PAGING_RESERVE, segmentSize: (r: number) => r }), lms({ policy: 'speculative', speculation: true })] });
    const storages = Array.from({ length: 6 }, (_, seed) => inactiveStorage(rt, seed));
    const controller = resolve(rt.container, LmsController);
    controller.endIteration();
    const perIteration: Record<string, number>[] = [];
    for (let iteration = 0; iteration < 6; iteration++) {
      for (const [k, storage] of storages.entries()) {
        {
          using _op = await pinAsync(storage);
          rt.write(storage, patternBytes(STORAGE_BYTES, 10 * iteration + k)); // a write: the next reclaim must copy again
          await device.queue.onSubmittedWorkDone(); // an operation's GPU work; page-outs enqueued before it complete meanwhile
        }
        // Every copy in flight lands before the next operation, so that mapAsync's timing (which varies with the
        // machine's load) cannot change what the next operation decides (as in the Chromium check).
        while (storages.some((s) => lmsOf(s).hasHostCopy && !lmsOf(s).hostCopyReady)) await new Promise((r) => setTimeout(r, 1));
      }
      controller.endIteration();
      perIteration.push({ ...stats(rt) });
      expect(stat(rt, 'reserved_bytes.all.peak')).to.be.at.most(SEGMENT_BUDGET);
    }
    // The first iteration is learned; the second and third are predicted from iterations whose prefetches still
    // changed what was reclaimed; from the fourth on it repeats, but for timing: a prefetch needs the page-out's
    // bytes on the host (mapAsync), whose arrival varies, so a storage more or less may be reclaimed in an
    // iteration and a reclaim may have to copy (the CPU tests, deterministic, hold recall at 1).
    const total = (key: string): number => perIteration.at(-1)![key]! - perIteration[2]![key]!;
    expect(total('speculative_hits'), 'reclaims that found a speculative page-out, from the fourth iteration').to.be.above(0);
    expect(total('prefetch'), 'prefetches from the fourth iteration').to.be.above(0);
    expect(total('prefetch_hits'), 'prefetched storages pinned').to.equal(total('prefetch'));
    // Every copy landed before the next operation: each page-in of a predicted storage was ready before its pin.
    expect(total('page_in_predicted'), 'page-ins of predicted storages, from the fourth iteration').to.be.above(0);
    expect(total('page_in_ready_before_use'), 'of them, ready before their pin').to.equal(total('page_in_predicted'));
    for (const [k, storage] of storages.entries()) await expectBytes(rt, storage, 50 + k);
  });
});

describe('LMS when the device says no before the budget does', function () {
  this.timeout(120_000);
  /** Devices of their own, kept alive to the end of the run (Dawn crashes if the GPU object goes first). */
  const keep: WebGpuContext[] = [];

    it('reclaims inactive LMS storages when the device refuses a segment before the budget is met', async function () {
const own = await ownDeviceOrSkip(this);
      keep.push(own);
      await using rt = await createRuntime({ plugins: [webgpu({ device: own.device, limit: '64MiB', segmentRefusal: 'mapped' }), lms()] });
      const deviceBytes = 16 << 20; // what this pretend device holds, far below the 64 MiB budget
      const seen: { backend?: WebGpuMemoryBackend } = {};
      refuseSegments(own.device, (size) => (seen.backend?.reservedBytes ?? 0) + size > deviceBytes);
      const storages = [0, 1].map((seed) => {
        const storage = rt.storage(6 << 20, { device: 'webgpu' });
        rt.write(storage, patternBytes(6 << 20, seed));
        pin(storage).release();
        return storage;
      });
      const backend = (seen.backend = ((rt.allocator('webgpu') as ForwardingAllocator).upstream as WebGpuAllocator).backend);
      const third = rt.storage(6 << 20, { device: 'webgpu' });
      expect(backend.refusedSegments).to.be.at.least(1);
      expect(storages.map((s) => s.lms!.state)).to.deep.equal(['reclaimed', 'inactive']);
      expect(backend.reservedBytes).to.be.at.most(deviceBytes);
      expect(third.lms!.state).to.equal('allocated');
      for (const [seed, storage] of storages.entries()) expect([...(await rt.read(storage)).subarray(0, 64)]).to.deep.equal([...patternBytes(6 << 20, seed).subarray(0, 64)]);
      expect(backend.lostError).to.equal(undefined);
    });
});
