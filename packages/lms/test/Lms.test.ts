import { expect } from 'chai';
import type { AllocatorStats, Plugin, Runtime, Token } from '@stowage/core';
import { BackendUnavailableError, CachingAllocator, CpuMemoryBackend, cpu, createRuntime, DeviceError, DisposedError, DisposeFailedError, wrapAllocators, InvalidArgumentError, OutOfMemoryError, resolve, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import type { LmsOptions, ReclaimCandidate, ReclaimRequest } from '@stowage/lms';
import { LmsController, LmsPolicy, lms, LmsAllocator, Residency, StorageResidency, LruPolicy, pin } from '@stowage/lms';
import { Residencies } from '@stowage/lms/testing';
import { adaptorCases, patternBytes, VirtualMemoryBackend } from '@stowage/core/testing';
import { LmsReclaimer } from '@stowage/core/plugin-kit';
import { cow, isCowDataPtr, lazyClone } from '@stowage/cow';

const MiB = 1 << 20;

/** A runtime whose CPU allocator has `limit` bytes, under LMS. */
function lmsRuntime(limit: number, options: LmsOptions = {}, more: Plugin[] = []): Promise<Runtime> {
  return createRuntime({ plugins: [cpu({ limit }), lms(options), ...more] });
}

/** A storage of `bytes` filled with `seed`-derived bytes, pinned once and unpinned (so it is inactive). */
function inactiveStorage(rt: Runtime, bytes: number, seed: number): StorageImpl {
  const storage = rt.storage(bytes);
  rt.write(storage, patternBytes(bytes, seed));
  pin(storage).release();
  return storage;
}

function lmsOf(storage: StorageImpl): StorageResidency {
  expect(storage.lms).to.be.instanceOf(StorageResidency);
  return storage.lms as StorageResidency;
}

function stats(rt: Runtime): AllocatorStats & Record<string, number> {
  return rt.allocator('cpu').memoryStats() as AllocatorStats & Record<string, number>;
}

async function expectBytes(rt: Runtime, storage: StorageImpl, seed: number): Promise<void> {
  expect(Buffer.from(await rt.read(storage)).equals(Buffer.from(patternBytes(storage.byteLength, seed)))).to.equal(true);
}

/** lru, with one hook that throws once `armed` is set. */
function throwingPolicy(hook: 'onPin' | 'onUnpin' | 'onReclaim', state: { armed: boolean }): LmsPolicy {
  const lru = new LruPolicy();
  return {
    name: 'throwing',
    chooseOne: (r: ReclaimRequest, c: Iterable<ReclaimCandidate>) => lru.chooseOne(r, c),
    chooseFragments: (r: ReclaimRequest, c: Iterable<ReclaimCandidate>) => lru.chooseFragments(r, c),
    [hook]: () => {
      if (state.armed) throw new Error(`${hook} failed`);
    },
  };
}

describe('LMS', () => {
  describe('states and transitions', () => {
    it('goes allocated → active (pin) → inactive (unpin) → reclaimed (reclaim) → active (pin), keeping the bytes', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const s = rt.storage(10 * MiB);
      rt.write(s, patternBytes(10 * MiB, 1));
      expect(s.lms!.state).to.equal('allocated');
      const guard = pin(s);
      expect(s.lms!.state).to.equal('active');
      guard.release();
      expect(s.lms!.state).to.equal('inactive');
      expect(resolve(rt.container, LmsController).reclaimInactive()).to.equal(10 * MiB);
      expect(s.lms!.state).to.equal('reclaimed');
      expect(stats(rt)['allocated_bytes.all.current']).to.equal(0);
      pin(s).release();
      expect(s.lms!.state).to.equal('inactive');
      await expectBytes(rt, s, 1);
    });

    it('brings a reclaimed storage back on access without a pin, leaving it inactive', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const s = inactiveStorage(rt, 10 * MiB, 2);
      resolve(rt.container, LmsController).reclaimInactive();
      expect(s.lms!.state).to.equal('reclaimed');
      const ptr = s.data();
      expect(ptr.isReleased).to.equal(false);
      expect(s.lms!.state).to.equal('inactive');
      await expectBytes(rt, s, 2);
    });

    it('reads a reclaimed storage from its host copy: it stays reclaimed, nothing is paged in, and the bytes are a copy', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const s = inactiveStorage(rt, 10 * MiB, 4);
      resolve(rt.container, LmsController).reclaimInactive();
      const before = stats(rt);
      const bytes = await rt.read(s);
      expect(Buffer.from(bytes).equals(Buffer.from(patternBytes(10 * MiB, 4)))).to.equal(true);
      expect(s.lms!.state).to.equal('reclaimed');
      const after = stats(rt);
      for (const key of ['page_in', 'allocated_bytes.all.current', 'reserved_bytes.all.current']) expect(after[key], key).to.equal(before[key]);
      bytes.fill(0); // the caller's copy: the storage's bytes are unchanged
      await expectBytes(rt, s, 4);
      pin(s).release();
      expect(stats(rt).page_in, 'a pin still brings it back').to.equal(after.page_in! + 1);
      await expectBytes(rt, s, 4);
    });

    it('keeps the host copy of an unwritten storage, so reclaiming it again only frees; a write drops the copy', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const controller = resolve(rt.container, LmsController);
      const s = inactiveStorage(rt, 10 * MiB, 3);
      controller.reclaimInactive();
      s.data(); // back, read only
      controller.reclaimInactive();
      expect(stats(rt).page_out).to.equal(1);
      expect(stats(rt).reclaimed).to.equal(2);
      s.mutableData(); // back, and written: the host copy is stale
      expect(lmsOf(s).hasHostCopy).to.equal(false);
      controller.reclaimInactive();
      expect(stats(rt).page_out).to.equal(2);
      await expectBytes(rt, s, 3);
    });

    it('nests pins: the storage stays active until the last unpin', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const s = rt.storage(MiB);
      s.lms!.pin();
      s.lms!.pin();
      s.lms!.unpin();
      expect(s.lms!.state).to.equal('active');
      s.lms!.unpin();
      expect(s.lms!.state).to.equal('inactive');
    });

    it('leaves the reclaim list when released, in any state but active', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const inactive = inactiveStorage(rt, MiB, 4);
      const device = resolve(rt.container, LmsController).device({ type: 'cpu', index: 0 })!; // made with the allocator
      const reclaimed = inactiveStorage(rt, 10 * MiB, 5);
      device.reclaimAll();
      const again = inactiveStorage(rt, MiB, 6);
      expect(device.list.size).to.equal(1);
      inactive.release();
      reclaimed.release();
      again.release();
      expect(device.list.size).to.equal(0);
      expect(stats(rt)['host_bytes.all.current']).to.equal(0);
    });

    it('gives every storage of an allocator that cannot page no LMS object, and the allocator keeps working', async () => {
      const controller = new Residencies(() => new (class implements LmsPolicy {
        readonly name = 'none';
        chooseOne(): undefined {
          return undefined;
        }
        chooseFragments(): ReclaimCandidate[] {
          return [];
        }
      })());
      using engine = new CachingAllocator(new VirtualMemoryBackend({ capacityBytes: 64 * MiB }));
      const noServices = { device: engine.device, get: () => undefined };
      expect(controller.wrap(engine, engine.device, noServices, () => undefined)).to.equal(engine); // a virtual backend has no pager
      await using rt = await createRuntime({ plugins: [cpu(), lms({ devices: ['webgpu'] })] });
      const s = rt.storage(1024);
      expect(s.lms).to.equal(null);
      expect(() => pin(s).release()).not.to.throw();
    });
  });

  describe('pin guard', () => {
    it('pins for the scope of a using block and unpins at its end', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      const b = rt.tensor([4, 4], { dtype: 'float32' });
      {
        using _guard = pin(a, b);
        expect([a.lms!.state, b.storage.lms!.state]).to.deep.equal(['active', 'active']);
      }
      expect([a.lms!.state, b.storage.lms!.state]).to.deep.equal(['inactive', 'inactive']);
    });

    it('unpins when the scope throws', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      expect(() => {
        using _guard = pin(a);
        throw new Error('inside');
      }).to.throw('inside');
      expect(a.lms!.state).to.equal('inactive');
    });

    it('nests guards, and a storage given twice is unpinned twice', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      {
        using _outer = pin(a);
        {
          using _inner = pin(a, a);
          expect(lmsOf(a).pinCount).to.equal(3);
        }
        expect(a.lms!.state).to.equal('active');
      }
      expect(lmsOf(a).pinCount).to.equal(0);
    });

    it('released early unpins once: the end of its scope changes nothing more', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      {
        using guard = pin(a);
        guard.release();
        expect(a.lms!.state).to.equal('inactive');
        expect(guard.isHeld).to.equal(false);
      }
      expect(lmsOf(a).pinCount).to.equal(0);
    });

    it('pins the resident storages first, so bringing one back never reclaims another of the same operation', async () => {
      await using rt = await lmsRuntime(20 * MiB);
      const a = inactiveStorage(rt, 10 * MiB, 7);
      const b = inactiveStorage(rt, 10 * MiB, 8);
      resolve(rt.container, LmsController).device({ type: 'cpu', index: 0 })!.reclaimAll();
      const c = inactiveStorage(rt, 10 * MiB, 9);
      const d = inactiveStorage(rt, 10 * MiB, 10); // a and b reclaimed; c, d resident and inactive
      {
        using _guard = pin(a, d);
        expect([a.lms!.state, c.lms!.state, d.lms!.state]).to.deep.equal(['active', 'reclaimed', 'active']);
      }
      await expectBytes(rt, a, 7);
      await expectBytes(rt, d, 10);
      await expectBytes(rt, b, 8);
    });
  });

  describe('misuse', () => {
    it('refuses to release an active storage, changing nothing', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      using _guard = pin(a);
      expect(() => a.release()).to.throw(InvalidArgumentError, /pinned/);
      expect([a.isReleased, a.lms!.state]).to.deep.equal([false, 'active']);
    });

    it('refuses an unpin without a pin', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      expect(() => a.lms!.unpin()).to.throw(InvalidArgumentError, /not pinned/);
      expect(a.lms!.state).to.equal('allocated');
    });

    it('refuses to pin a released storage', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = rt.storage(MiB);
      a.release();
      expect(() => pin(a)).to.throw(UseAfterReleaseError);
      expect(() => a.lms!.pin()).to.throw(UseAfterReleaseError);
    });

    it('refuses to reclaim a storage that is not inactive through its LMS object, changing nothing', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const pinned = rt.storage(MiB);
      using _guard = pin(pinned);
      const fresh = rt.storage(MiB);
      const reclaimed = inactiveStorage(rt, MiB, 3);
      lmsOf(reclaimed).reclaim();
      for (const [storage, state] of [[pinned, 'active'], [fresh, 'allocated'], [reclaimed, 'reclaimed']] as const) {
        expect(() => lmsOf(storage).reclaim(), state).to.throw(InvalidArgumentError, new RegExp(`reclaim\\(\\) must be an inactive storage.*state '${state}'`));
        expect(storage.lms!.state).to.equal(state);
      }
      expect(pinned.peekDataPtr().isReleased, 'the pinned storage keeps its memory').to.equal(false);
      await expectBytes(rt, reclaimed, 3);
    });

    it("refuses to release a live storage's LMS object: the storage is what gets released", async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = inactiveStorage(rt, MiB, 4);
      expect(() => lmsOf(a).release()).to.throw(InvalidArgumentError, /storage\.release\(\)/);
      expect([lmsOf(a).isReleased, a.lms!.state]).to.deep.equal([false, 'inactive']);
      expect(resolve(rt.container, LmsController).reclaimInactive(), 'LMS still reclaims it').to.equal(MiB);
      a.release();
      expect(lmsOf(a).isReleased).to.equal(true);
    });

    it('refuses what is not a storage or tensor', async () => {
      expect(() => pin({} as StorageImpl)).to.throw(InvalidArgumentError, /StorageImpl or TensorImpl/);
    });

    it('throws OutOfMemoryError naming the pinned bytes when one operation pins more than the budget; nothing changes and a smaller allocation works', async () => {
      await using rt = await lmsRuntime(24 * MiB);
      const a = rt.storage(10 * MiB);
      const b = rt.storage(10 * MiB);
      using _guard = pin(a, b);
      let error: unknown;
      try {
        rt.storage(10 * MiB);
      } catch (e) {
        error = e;
      }
      expect(error).to.be.instanceOf(OutOfMemoryError);
      expect((error as Error).message).to.match(/LMS: 20\.00 MiB pinned by 2 storage\(s\), 0 B inactive/);
      expect([a.lms!.state, b.lms!.state]).to.deep.equal(['active', 'active']);
      expect(stats(rt)['allocated_bytes.all.current']).to.equal(20 * MiB);
      expect(rt.storage(MiB).byteLength).to.equal(MiB);
    });

    it('says when the pinned set fits the budget but pinned blocks split the segments left', async () => {
      await using rt = await lmsRuntime(4 * MiB);
      // Two 2 MiB segments; one pinned 512 KiB storage in each leaves 3 MiB free, but no 2 MiB run.
      const storages = Array.from({ length: 8 }, (_, i) => inactiveStorage(rt, 512 * 1024, i));
      using _guard = pin(storages[0]!, storages[4]!);
      let error: unknown;
      try {
        rt.storage(2 * MiB);
      } catch (e) {
        error = e;
      }
      expect(error).to.be.instanceOf(OutOfMemoryError);
      expect((error as Error).message).to.match(/fit the 4\.00 MiB budget, but pinned blocks split the segments/);
    });

    it('leaves a reclaimed storage reclaimed when bringing it back runs out of memory', async () => {
      await using rt = await lmsRuntime(20 * MiB);
      const a = inactiveStorage(rt, 10 * MiB, 11);
      resolve(rt.container, LmsController).reclaimInactive();
      const b = rt.storage(10 * MiB);
      const c = rt.storage(10 * MiB);
      using _guard = pin(b, c);
      expect(() => pin(a)).to.throw(OutOfMemoryError);
      expect(a.lms!.state).to.equal('reclaimed');
      expect(lmsOf(a).pinCount).to.equal(0);
    });
  });

  describe('reclaim under the budget (IBM LMS test_large_model_support)', () => {
    it('serves a new allocation at the limit by reclaiming an inactive storage: allocated bytes stay, reclaimed bytes grow, counted as reclaim_one', async () => {
      await using rt = await lmsRuntime(80 * MiB);
      const inactive = [0, 1, 2, 3].map((i) => inactiveStorage(rt, 20 * MiB, i));
      const before = stats(rt)['allocated_bytes.all.current'];
      const pinned = rt.storage(20 * MiB);
      using _guard = pin(pinned);
      const after = stats(rt);
      expect(after['allocated_bytes.all.current']).to.equal(before);
      expect(after.reclaimed_bytes).to.equal(20 * MiB);
      expect(after['alloc_distribution.reclaim_one']).to.equal(1);
      expect(after['reserved_bytes.all.current']).to.be.at.most(80 * MiB);
      expect(inactive.map((s) => s.lms!.state)).to.deep.equal(['reclaimed', 'inactive', 'inactive', 'inactive']);
      for (const [i, s] of inactive.entries()) await expectBytes(rt, s, i);
    });

    it('grows allocated bytes instead under a limit with room, counted as device_alloc', async () => {
      await using rt = await lmsRuntime(1024 * MiB);
      [0, 1, 2, 3].forEach((i) => inactiveStorage(rt, 20 * MiB, i));
      rt.storage(20 * MiB);
      const after = stats(rt);
      expect(after['allocated_bytes.all.current']).to.equal(100 * MiB);
      expect(after.reclaimed_bytes).to.equal(0);
      expect(after['alloc_distribution.device_alloc']).to.equal(5);
    });

    it('never reclaims a pinned storage, and counts pinned bytes below allocated bytes', async () => {
      await using rt = await lmsRuntime(40 * MiB);
      const held = rt.storage(10 * MiB);
      using _guard = pin(held);
      inactiveStorage(rt, 10 * MiB, 1);
      inactiveStorage(rt, 10 * MiB, 2);
      rt.storage(10 * MiB);
      rt.storage(10 * MiB);
      expect(held.lms!.state).to.equal('active');
      const s = stats(rt);
      expect(s['pinned_bytes.all.current']).to.equal(10 * MiB);
      expect(s['pinned_bytes.all.current']).to.be.below(s['allocated_bytes.all.current']);
    });

    it('reclaims fragments that coalesce when no single storage frees enough', async () => {
      await using rt = await lmsRuntime(4 * MiB, { policy: 'best-fit' });
      // Two 2 MiB segments, each of four 512 KiB storages; a 1.5 MiB request needs three adjacent ones.
      const storages = Array.from({ length: 8 }, (_, i) => inactiveStorage(rt, 512 * 1024, i));
      rt.storage(1536 * 1024);
      const s = stats(rt);
      expect(s['alloc_distribution.reclaim_fragments']).to.equal(1);
      expect(s.reclaimed_bytes).to.equal(1536 * 1024);
      for (const [i, storage] of storages.entries()) await expectBytes(rt, storage, i);
    });

    it('reclaims everything inactive as a last resort (reclaim_all)', async () => {
      await using rt = await lmsRuntime(12 * MiB);
      // Six 2 MiB segments of 512 KiB storages; a 10 MiB request needs a segment of its own: only releasing five
      // whole segments makes room.
      const storages = Array.from({ length: 24 }, (_, i) => inactiveStorage(rt, 512 * 1024, i));
      rt.storage(10 * MiB);
      expect(stats(rt)['alloc_distribution.reclaim_all']).to.equal(1);
      for (const [i, storage] of storages.entries()) await expectBytes(rt, storage, i);
    });

    it('lists reclaimed storages in the snapshot', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      inactiveStorage(rt, 10 * MiB, 1);
      resolve(rt.container, LmsController).reclaimInactive();
      const snapshot = (rt.allocator('cpu') as LmsAllocator).snapshot();
      expect(snapshot.lms_reclaimed).to.deep.equal([{ size: 10 * MiB, host_copy_ready: true }]);
    });
  });

  describe('through adaptors (Note [Device services] in core)', () => {
    for (const adaptor of adaptorCases()) {
      for (const order of ['before', 'after'] as const) {
        it(`reclaims and pages back in through a ${adaptor.name} registered ${order} lms()`, async () => {
          const wrap = wrapAllocators('cpu', (a) => adaptor.wrap(a));
          await using rt = await createRuntime({ plugins: order === 'before' ? [cpu({ limit: 32 * MiB }), wrap, lms()] : [cpu({ limit: 32 * MiB }), lms(), wrap] });
          const storages = [0, 1, 2].map((seed) => inactiveStorage(rt, 12 * MiB, seed));
          expect(storages.map((s) => s.lms?.state)).to.deep.equal(['reclaimed', 'inactive', 'inactive']);
          expect(stats(rt)['page_out']).to.be.greaterThan(0);
          pin(storages[0]!).release();
          expect(storages[0]!.lms!.state).to.equal('inactive');
          for (const [seed, s] of storages.entries()) await expectBytes(rt, s, seed);
          const residency = rt.service(Residency, 'cpu');
          expect(residency, 'the residency is a device service the adaptor cannot hide').to.equal(resolve(rt.container, LmsController).device('cpu'));
          expect(residency!.stats.toRecord()['page_out']).to.equal(stats(rt)['page_out']);
        });
      }
    }
  });

  describe('policies', () => {
    it('lru takes the least recently unpinned storage that fits', async () => {
      await using rt = await lmsRuntime(40 * MiB);
      const [a, b, c, d] = [0, 1, 2, 3].map((i) => inactiveStorage(rt, 10 * MiB, i));
      pin(a!).release(); // a is now the most recent
      rt.storage(10 * MiB);
      expect([a, b, c, d].map((s) => s!.lms!.state)).to.deep.equal(['inactive', 'reclaimed', 'inactive', 'inactive']);
    });

    it('best-fit takes the smallest storage that fits', async () => {
      await using rt = await lmsRuntime(42 * MiB, { policy: 'best-fit' });
      const big = inactiveStorage(rt, 20 * MiB, 0);
      const small = inactiveStorage(rt, 10 * MiB, 1);
      const mid = inactiveStorage(rt, 12 * MiB, 2);
      rt.storage(10 * MiB);
      expect([big, small, mid].map((s) => s.lms!.state)).to.deep.equal(['inactive', 'reclaimed', 'inactive']);
    });

    it('swaps to a third-party policy with one registration', async () => {
      const seen: number[] = [];
      class NewestFirst implements LmsPolicy {
        readonly name = 'newest-first';
        chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
          let newest: ReclaimCandidate | undefined;
          for (const c of candidates) if (c.placement.size >= request.bytes && (newest === undefined || c.unpinnedAt > newest.unpinnedAt)) newest = c;
          return newest;
        }
        chooseFragments(): ReclaimCandidate[] {
          return [];
        }
        onReclaim(storage: StorageImpl): void {
          seen.push(storage.byteLength);
        }
      }
      const swap: Plugin = { name: 'newest-first', register: (container) => void container.register(LmsPolicy, { useClass: NewestFirst }) };
      await using rt = await lmsRuntime(30 * MiB, {}, [swap]);
      const [a, b, c] = [0, 1, 2].map((i) => inactiveStorage(rt, 10 * MiB, i));
      rt.storage(10 * MiB);
      expect(resolve(rt.container, LmsController).policy.name).to.equal('newest-first');
      expect([a, b, c].map((s) => s!.lms!.state)).to.deep.equal(['inactive', 'inactive', 'reclaimed']);
      expect(seen).to.deep.equal([10 * MiB]);
    });

    it('refuses an unknown policy name or a policy object without its methods', () => {
      expect(() => lms({ policy: 'fifo' as 'lru' })).to.throw(InvalidArgumentError, /'lru', 'best-fit'/);
      expect(() => lms({ policy: {} as LmsPolicy })).to.throw(InvalidArgumentError, /chooseOne/);
      expect(() => lms({ limit: 1 } as LmsOptions)).to.throw(InvalidArgumentError);
      expect(() => lms({ policy: { name: 'x', chooseOne: () => undefined, chooseFragments: () => [], onPin: 1 } as unknown as LmsPolicy })).to.throw(InvalidArgumentError, /onPin/);
    });

    it('refuses devices that are not lowercase device types, rather than paging nothing', () => {
      for (const devices of [['CPU'], ['cpu:0'], [], ['gpu!'], 'cpu', [null]]) {
        expect(() => lms({ devices } as unknown as LmsOptions), JSON.stringify(devices)).to.throw(InvalidArgumentError, /lowercase device types/);
      }
    });

    it('refuses a policy another plugin registered that is not an LmsPolicy, when the first paging allocator is made', async () => {
      const stringPolicy: Plugin = { name: 'string-policy', register: (c) => void c.register(LmsPolicy, { useValue: 'lru' as unknown as LmsPolicy }) };
      await using rt = await lmsRuntime(32 * MiB, {}, [stringPolicy]);
      expect(() => rt.storage(64)).to.throw(InvalidArgumentError, /the LmsPolicy registered in the runtime/);
    });

    it('reports a policy whose choice is not a candidate with a typed error at the reclaim, and keeps working', async () => {
      const broken = { name: 'broken', chooseOne: () => 42, chooseFragments: () => 'none' } as unknown as LmsPolicy;
      await using rt = await lmsRuntime(24 * MiB, { policy: broken });
      const a = inactiveStorage(rt, 10 * MiB, 1);
      inactiveStorage(rt, 10 * MiB, 2);
      expect(() => rt.storage(10 * MiB)).to.throw(InvalidArgumentError, /the LMS policy 'broken': chooseOne\(\)/);
      expect(lmsOf(a).state).to.equal('inactive', 'nothing was reclaimed');
      await expectBytes(rt, a, 1);
      expect(rt.storage(1024).byteLength).to.equal(1024, 'an allocation that fits still works');
    });
  });

  describe('adopted host copies (StorageResidency#adoptHostCopy)', () => {
    it('reclaims a storage whose host copy was adopted without copying it, and pages the adopted bytes back in', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const first = inactiveStorage(rt, 12 * MiB, 0);
      lmsOf(first).adoptHostCopy(patternBytes(12 * MiB, 0));
      expect(lmsOf(first).hasHostCopy).to.equal(true);
      const copied: boolean[] = [];
      rt.service(Residency, 'cpu')!.events.on('pagedOut', (e) => void copied.push(e.copied));
      const others = [1, 2].map((seed) => inactiveStorage(rt, 12 * MiB, seed));
      expect([first, ...others].map((s) => s.lms?.state)).to.deep.equal(['reclaimed', 'inactive', 'inactive']);
      expect(copied, 'the adopted copy served: nothing was copied to the host').to.deep.equal([false]);
      pin(first).release();
      await expectBytes(rt, first, 0);
      for (const [i, s] of others.entries()) await expectBytes(rt, s, i + 1);
    });

    it('refuses host bytes of another length with InvalidArgumentError and keeps no copy', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const storage = inactiveStorage(rt, 1 * MiB, 3);
      expect(() => lmsOf(storage).adoptHostCopy(new Uint8Array(10))).to.throw(InvalidArgumentError, /byte length/);
      expect(lmsOf(storage).hasHostCopy).to.equal(false);
    });

    it('drops an adopted copy once the storage is written again', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const storage = inactiveStorage(rt, 1 * MiB, 4);
      lmsOf(storage).adoptHostCopy(patternBytes(1 * MiB, 4));
      rt.write(storage, patternBytes(1 * MiB, 5));
      expect(lmsOf(storage).hasHostCopy).to.equal(false);
      await expectBytes(rt, storage, 5);
    });
  });

  describe('one residency per device', () => {
    it('offers each paging device\'s residency as a device service, and none for a device LMS does not page', async () => {
      await using rt = await createRuntime({ plugins: [cpu({ limit: 32 * MiB }), lms({ devices: ['cpu'] })] });
      const residency = rt.service(Residency, 'cpu:0');
      expect(residency).to.equal(resolve(rt.container, LmsController).device('cpu:0'));
      expect(residency!.device).to.deep.equal({ type: 'cpu', index: 0 });
      await using off = await createRuntime({ plugins: [cpu({ limit: 32 * MiB }), lms({ devices: ['webgpu'] })] });
      expect(off.service(Residency, 'cpu')).to.equal(undefined);
    });

    it('refuses a second live allocator for a device rather than letting it take the first one\'s reclaims and statistics', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const first = rt.allocator('cpu');
      const controller = resolve(rt.container, LmsController) as Residencies;
      const services = { device: first.device, get: <T>(token: Token<T>): T | undefined => rt.service(token, 'cpu') };
      using second = new CachingAllocator(new CpuMemoryBackend());
      expect(() => controller.wrap(second, first.device, services, () => undefined)).to.throw(InvalidArgumentError, /one allocator per device under LMS: cpu:0/);
      expect(controller.device('cpu')).to.equal((first as LmsAllocator).lms, 'the first keeps its residency');
    });
  });

  describe('with copy-on-write (Note [Sole references] in core)', () => {
    it('never reclaims a storage while a lazy clone shares its block, and reclaims it again once the clone is released', async () => {
      await using rt = await createRuntime({ plugins: [cpu({ limit: 24 * MiB }), lms(), cow()] });
      const a = inactiveStorage(rt, 10 * MiB, 1);
      const clone = lazyClone(a)!;
      expect(isCowDataPtr(a.peekDataPtr())).to.equal(true);
      pin(a).release();
      const controller = resolve(rt.container, LmsController);
      expect(controller.reclaimInactive(), 'a shared block is not the storage alone: nothing moves').to.equal(0);
      expect(lmsOf(a).state).to.equal('inactive');
      clone.release();
      expect(isCowDataPtr(a.peekDataPtr()), 'still a COW pointer, now the only one').to.equal(true);
      const b = inactiveStorage(rt, 10 * MiB, 2);
      rt.storage(10 * MiB); // over the budget: a, the least recently unpinned, goes
      expect(lmsOf(a).state).to.equal('reclaimed');
      expect(lmsOf(b).state).to.equal('inactive');
      pin(a).release(); // back, on a block of its own
      expect(isCowDataPtr(a.peekDataPtr())).to.equal(false);
      await expectBytes(rt, a, 1);
      expect(stats(rt).reclaimed).to.be.at.least(1);
    });
  });

  describe('bad input', () => {
    it('refuses a reclaim or a lookup for something that is not a device', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      rt.storage(64); // makes the CPU allocator, and LMS's residency of it
      const controller = resolve(rt.container, LmsController);
      for (const device of ['gpu!', { type: 'gpu!', index: 0 }, 'CPU', null]) {
        expect(() => controller.reclaimInactive(device as string), JSON.stringify(device)).to.throw(InvalidArgumentError);
        expect(() => controller.device(device as string), JSON.stringify(device)).to.throw(InvalidArgumentError);
      }
      expect(() => resolve(rt.container, LmsReclaimer).reclaim({ type: 'gpu!', index: 0 }, 64), 'the reclaimer the engines call').to.throw(InvalidArgumentError);
      expect(controller.reclaimInactive('cuda:0'), 'a device without LMS frees nothing').to.equal(0);
      expect(controller.device('cpu')).to.not.equal(undefined);
    });

    it('says which plugin is missing when LMS is resolved in a runtime without lms()', async () => {
      await using rt = await createRuntime({ plugins: [cpu()] });
      expect(() => resolve(rt.container, LmsController)).to.throw(BackendUnavailableError, /stowage\.LmsController.*createRuntime\(\{ plugins \}\)/);
    });

    it('disposes a runtime with a storage still pinned: everything is freed, and a typed error names the pin', async () => {
      const rt = await lmsRuntime(32 * MiB);
      const allocator = rt.allocator();
      const s = rt.storage(1024);
      pin(s);
      let error: unknown;
      await rt.dispose().catch((e: unknown) => (error = e));
      expect(error).to.be.instanceOf(DisposeFailedError);
      expect((error as DisposeFailedError).errors[0]).to.be.instanceOf(InvalidArgumentError);
      expect(() => allocator.allocate(8)).to.throw(DisposedError);
    });
  });

  describe('statistics', () => {
    it('counts pins, page-outs and page-ins, and resets peaks to current', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = inactiveStorage(rt, 10 * MiB, 1);
      resolve(rt.container, LmsController).reclaimInactive();
      pin(a).release();
      const s = stats(rt);
      expect([s['pinned.all.allocated'], s['pinned.all.peak'], s['pinned_bytes.all.peak'], s.page_out, s.page_out_bytes, s.page_in, s.page_in_bytes]).to.deep.equal([
        2,
        1,
        10 * MiB,
        1,
        10 * MiB,
        1,
        10 * MiB,
      ]);
      rt.allocator('cpu').resetPeakStats();
      expect(stats(rt)['pinned.all.peak']).to.equal(0);
    });
  });

  describe('events', () => {
    it('reports every page-out (copied or not) and page-in, and a listener that throws breaks nothing', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = inactiveStorage(rt, 10 * MiB, 1);
      const device = resolve(rt.container, LmsController).device({ type: 'cpu', index: 0 })!;
      const seen: string[] = [];
      device.events.on('pagedOut', () => {
        throw new Error('listener');
      });
      device.events.on('pagedOut', (e) => seen.push(`out ${e.bytes} copied=${e.copied}`));
      device.events.on('pagedIn', (e) => seen.push(`in ${e.bytes}`));
      device.events.on('listenerFailed', (e) => seen.push(`failed ${e.event}`));
      device.reclaimAll();
      a.data();
      device.reclaimAll();
      expect(seen).to.deep.equal([`failed pagedOut`, `out ${10 * MiB} copied=true`, `in ${10 * MiB}`, `failed pagedOut`, `out ${10 * MiB} copied=false`]);
      await expectBytes(rt, a, 1);
    });

    it('reports the device address of the block a page-out freed and of the block a page-in filled', async () => {
      await using rt = await lmsRuntime(32 * MiB);
      const a = inactiveStorage(rt, 10 * MiB, 1);
      const before = a.peekDataPtr().address;
      const device = resolve(rt.container, LmsController).device({ type: 'cpu', index: 0 })!;
      const addresses: [string, number][] = [];
      device.events.on('pagedOut', (e) => addresses.push(['out', e.address]));
      device.events.on('pagedIn', (e) => addresses.push(['in', e.address]));
      device.reclaimAll();
      a.data();
      expect(addresses).to.deep.equal([
        ['out', before],
        ['in', a.peekDataPtr().address],
      ]);
    });
  });

  describe('under misbehaving callers', () => {
    describe('StorageImpl#resize under LMS', () => {
      it('reclaims another storage, never the one being resized, keeping its bytes', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 24 * MiB }), lms()] });
        const s = rt.storage(10 * MiB, { resizable: true });
        rt.write(s, patternBytes(10 * MiB, 7));
        pin(s).release(); // inactive, the least recently unpinned
        const other = inactiveStorage(rt, 10 * MiB, 8);
        s.resize(12 * MiB);
        expect([s.lms!.state, other.lms!.state]).to.deep.equal(['inactive', 'reclaimed']);
        const bytes = await rt.read(s);
        expect(Buffer.from(bytes.subarray(0, 10 * MiB)).equals(Buffer.from(patternBytes(10 * MiB, 7)))).to.equal(true);
      });

      it('brings a reclaimed storage back to resize it', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 24 * MiB }), lms()] });
        const s = rt.storage(10 * MiB, { resizable: true });
        rt.write(s, patternBytes(10 * MiB, 8));
        pin(s).release();
        resolve(rt.container, LmsController).reclaimInactive();
        s.resize(12 * MiB);
        expect(s.lms!.state).to.equal('inactive');
        expect(s.peekDataPtr().isReleased).to.equal(false);
        expect(Buffer.from((await rt.read(s)).subarray(0, 10 * MiB)).equals(Buffer.from(patternBytes(10 * MiB, 8)))).to.equal(true);
      });

      it('gives an OutOfMemoryError and keeps the storage when old and new blocks cannot fit together', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 20 * MiB }), lms()] });
        const s = rt.storage(10 * MiB, { resizable: true });
        rt.write(s, patternBytes(10 * MiB, 9));
        pin(s).release();
        expect(() => s.resize(12 * MiB)).to.throw(OutOfMemoryError);
        expect([s.byteLength, s.lms!.state]).to.deep.equal([10 * MiB, 'inactive']);
        expect(Buffer.from(await rt.read(s)).equals(Buffer.from(patternBytes(10 * MiB, 9)))).to.equal(true);
      });

      it('keeps pinned_bytes equal to the pinned storages\' bytes when a pinned storage is resized', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 64 * MiB }), lms()] });
        const s = rt.storage(1 * MiB, { resizable: true });
        const guard = pin(s);
        s.resize(2 * MiB);
        guard.release();
        expect(stats(rt)['pinned_bytes.all.current']).to.equal(0);
      });
    });

    describe('LmsPolicy hooks that throw', () => {
      it('reports a throwing onPin as listenerFailed, and the pin holds', async () => {
        const state = { armed: true };
        await using rt = await createRuntime({ plugins: [cpu({ limit: 64 * MiB }), lms({ policy: throwingPolicy('onPin', state) })] });
        const s = rt.storage(MiB);
        const failures: string[] = [];
        resolve(rt.container, LmsController).device({ type: 'cpu', index: 0 })!.events.on('listenerFailed', (e) => failures.push(e.event));
        const guard = pin(s);
        expect([s.lms!.state, lmsOf(s).pinCount, failures]).to.deep.equal(['active', 1, ['policy.onPin']]);
        guard.release();
        expect(() => s.release()).to.not.throw();
      });

      it('turns a chooseOne that throws into an InvalidArgumentError naming the policy, with the error as its cause; nothing is reclaimed', async () => {
        const bug = new RangeError('index out of range');
        const policy = { name: 'buggy', chooseOne: () => { throw bug; }, chooseFragments: () => [] };
        await using rt = await createRuntime({ plugins: [cpu({ limit: 20 * MiB }), lms({ policy })] });
        const a = inactiveStorage(rt, 10 * MiB, 5);
        rt.storage(10 * MiB);
        let error: unknown;
        try {
          rt.storage(10 * MiB);
        } catch (e) {
          error = e;
        }
        expect(error).to.be.instanceOf(InvalidArgumentError);
        expect((error as Error).message).to.match(/the LMS policy 'buggy': chooseOne\(\).*RangeError: index out of range/);
        expect((error as Error).cause).to.equal(bug);
        expect(a.lms!.state).to.equal('inactive');
        expect(stats(rt)['allocated_bytes.all.current']).to.equal(20 * MiB);
      });

      it('unpins every storage of a guard even when unpinning one throws', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 64 * MiB }), lms()] });
        const a = rt.storage(MiB);
        const b = rt.storage(MiB);
        const guard = pin(a, b);
        b.lms!.unpin(); // b's pin taken behind the guard's back: the guard's unpin of b throws
        expect(() => guard.release()).to.throw(InvalidArgumentError, /not pinned/);
        expect([a.lms!.state, b.lms!.state]).to.deep.equal(['inactive', 'inactive']);
      });

      it('a throwing onReclaim does not fail an allocation that reclaim made room for', async () => {
        const state = { armed: true };
        await using rt = await createRuntime({ plugins: [cpu({ limit: 20 * MiB }), lms({ policy: throwingPolicy('onReclaim', state) })] });
        const a = rt.storage(10 * MiB);
        pin(a).release();
        rt.storage(10 * MiB);
        expect(() => rt.storage(10 * MiB)).to.not.throw();
      });
    });

    describe('StorageResidency#pin after a failed page-out', () => {
      it('reports the failed copy, not PageInPendingError, once the page-out rejected', async () => {
        const engine = new CachingAllocator(new CpuMemoryBackend());
        const failure = new Error('device lost during the copy');
        const pager = {
          device: engine.device,
          pageOut: (src: { byteLength: number }) => {
            const done = Promise.reject(failure);
            done.catch(() => {});
            return { byteLength: src.byteLength, bytes: null, done };
          },
          pageIn: () => {},
        };
        const alloc = new LmsAllocator(engine, pager, engine, () => new LruPolicy());
        const s = new StorageImpl({ dataPtr: alloc.allocate(MiB), allocator: alloc });
        pin(s).release();
        alloc.lms.reclaimAll();
        await s.lms!.ready().catch(() => {});
        let thrown: unknown;
        try {
          pin(s);
        } catch (e) {
          thrown = e;
        }
        expect(thrown).to.be.instanceOf(DeviceError);
        expect((thrown as Error).message).to.match(/page-out failed \(device lost during the copy\)/);
      });
    });

    describe('Runtime#dispose under LMS', () => {
      it('drops the host copies of reclaimed storages', async () => {
        const rt = await createRuntime({ plugins: [cpu({ limit: 64 * MiB }), lms()] });
        const s = rt.storage(4 * MiB);
        pin(s).release();
        const controller = resolve(rt.container, LmsController);
        controller.reclaimInactive();
        const device = controller.device({ type: 'cpu', index: 0 })!;
        expect(device.stats.toRecord()['host_bytes.all.current']).to.equal(4 * MiB);
        await rt.dispose();
        expect(device.stats.toRecord()['host_bytes.all.current']).to.equal(0);
        expect(device.reclaimedStorages.size).to.equal(0);
      });
    });

    describe('Residency#reclaim re-entered from a pageOut listener', () => {
      it('does not throw OutOfMemoryError while reclaimable storages remain, when a listener pins a reclaimed storage mid-reclaim', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 30 * MiB }), lms()] });
        const controller = resolve(rt.container, LmsController);
        const x = rt.storage(10 * MiB);
        pin(x).release();
        controller.reclaimInactive(); // x reclaimed
        const others = [0, 1, 2].map(() => {
          const s = rt.storage(10 * MiB);
          pin(s).release();
          return s;
        });
        const device = controller.device({ type: 'cpu', index: 0 })!;
        let guard: { release(): void } | undefined;
        device.events.on('pagedOut', () => {
          if (guard === undefined) guard = pin(x); // takes the block the reclaim just freed
        });
        try {
          expect(() => rt.storage(10 * MiB)).to.not.throw();
        } finally {
          guard?.release();
        }
        expect(others.map((s) => s.lms!.state)).to.include('inactive');
      });
    });

    describe('StorageResidency#access re-entered from a pageIn listener', () => {
      it('a listener that pins the storage being brought back neither leaks a block nor breaks the state', async () => {
        await using rt = await createRuntime({ plugins: [cpu({ limit: 64 * MiB }), lms()] });
        const controller = resolve(rt.container, LmsController);
        const s = rt.storage(4 * MiB);
        pin(s).release();
        controller.reclaimInactive();
        const device = controller.device({ type: 'cpu', index: 0 })!;
        const guards: { release(): void }[] = [];
        let once = true;
        device.events.on('pagedIn', (e) => {
          if (!once) return;
          once = false;
          guards.push(pin(e.storage));
        });
        s.data(); // access brings it back; the listener pins it as soon as it is
        const lmsState = s.lms!.state;
        const allocated = stats(rt)['allocated_bytes.all.current'];
        expect(allocated).to.equal(4 * MiB);
        expect(() => { for (const g of guards) g.release(); }).to.not.throw();
        expect(lmsState).to.equal('active');
      });
    });
  });
});
