import { expect } from 'chai';
import fc from 'fast-check';
import type { DataPtr, Runtime, StorageImpl } from '@stowage/core';
import { cpu, createRuntime, resolve, TensorImpl } from '@stowage/core';
import { assertAllocatorInvariants, expectTypedOrSuccess, junk, junkArgs, patternBytes } from '@stowage/core/testing';
import { LmsController, LruPolicy, lms, pin, pinAsync, PinGuard, StorageResidency } from '@stowage/lms';

// Note [The public API under junk] (core's test/publicApi.property.test.ts), for LMS's entry points: lms() options,
// pin/pinAsync and their guards, the controller a runtime registers, and a storage's LMS object (StorageResidency).
// Each call, fed junk with the scene's storages mixed in, succeeds or throws a StowageError with a code, and then:
// every storage keeps its bytes; the only storage pinned is the one the test pins (and LMS's pinned statistics
// say so); the CPU allocator's statistics equal a recount of the pointers the storages hold, and it still
// allocates. Not fed junk: `new PinGuard(...)`, which only pin and pinAsync make (@internal), and the members a
// storage's LMS object has for LMS itself (pinUnrecorded, unpinUnrecorded: @internal).

const KiB = 1 << 10;
const RUNS = { numRuns: 100 };

/** Policies that are not (hooks of the wrong type), that choose what a policy must not, or that throw; and lru. */
const lru = new LruPolicy();
const wrongPolicies: unknown[] = [
  { name: 'wrong', chooseOne: () => 'the first', chooseFragments: () => 5 },
  { name: 'wrong', chooseOne: () => undefined, chooseFragments: () => [null, { storage: 1 }] },
  { name: 'not offered', chooseOne: () => ({ storage: {}, placement: {} }), chooseFragments: () => [] },
  { name: 'hook of the wrong type', chooseOne: () => undefined, chooseFragments: () => [], onPin: 'yes' },
  { name: 'throws', chooseOne: () => { throw new RangeError('a bug in the policy'); }, chooseFragments: () => [] },
  { name: 'hooks throw', chooseOne: lru.chooseOne.bind(lru), chooseFragments: lru.chooseFragments.bind(lru), onPin: () => { throw new TypeError('a bug in onPin'); }, onReclaim: () => { throw new Error('a bug in onReclaim'); } },
  lru,
];

/** What a scene holds: a storage in each LMS state, a tensor, a released storage, and the guard pinning `active`. */
interface Scene {
  readonly reclaimed: StorageImpl;
  readonly inactive: StorageImpl;
  readonly active: StorageImpl;
  readonly allocated: StorageImpl;
  readonly tensor: TensorImpl;
  readonly released: StorageImpl;
  readonly guard: PinGuard;
  readonly seeds: Map<StorageImpl, number>;
}

describe("lms's public API under junk", () => {
  let rt: Runtime;
  let controller: LmsController;
  beforeEach(async () => {
    rt = await createRuntime({ plugins: [cpu({ limit: '8MiB' }), lms()] });
    controller = resolve(rt.container, LmsController);
  });
  afterEach(async () => {
    await rt.dispose();
  });

  function written(bytes: number, seed: number, seeds: Map<StorageImpl, number>): StorageImpl {
    const storage = rt.storage(bytes);
    rt.write(storage, patternBytes(bytes, seed));
    seeds.set(storage, seed);
    return storage;
  }

  function scene(): Scene {
    const seeds = new Map<StorageImpl, number>();
    const reclaimed = written(4 * KiB, 1, seeds);
    pin(reclaimed).release();
    controller.reclaimInactive();
    const inactive = written(4 * KiB, 2, seeds);
    pin(inactive).release();
    const active = written(8 * KiB, 3, seeds);
    const guard = pin(active);
    const allocated = written(2 * KiB, 4, seeds);
    const tensor = rt.tensor([4, 4]);
    const released = rt.storage(1 * KiB);
    released.release();
    expect(reclaimed.lms!.state).to.equal('reclaimed');
    return { reclaimed, inactive, active, allocated, tensor, released, guard, seeds };
  }

  const plausible = (s: Scene): unknown[] => [s.reclaimed, s.inactive, s.active, s.allocated, s.tensor, s.released, s.guard, rt, 'cpu', 'cpu:0', { type: 'cpu', index: 0 }, 4 * KiB, true, false];

  /** The storages a scene holds live (the released one aside). */
  const liveStorages = (s: Scene): StorageImpl[] => [s.reclaimed, s.inactive, s.active, s.allocated, s.tensor.storage];

  /** What must hold after every call: see the note at the top. */
  async function expectConsistent(s: Scene): Promise<void> {
    for (const storage of liveStorages(s)) {
      expect(storage.isReleased, 'a storage the test holds was released').to.equal(false);
      const residency = storage.lms as StorageResidency;
      expect(residency.isReleased, "a live storage's LMS object was released").to.equal(false);
      expect(residency.pinCount, `pins of the ${storage.byteLength}-byte storage`).to.equal(storage === s.active ? 1 : 0);
      expect(residency.state === 'active', `state '${residency.state}' with ${residency.pinCount} pins`).to.equal(residency.pinCount > 0);
      expect(storage.peekDataPtr().isReleased, `a ${residency.state} storage's pointer`).to.equal(residency.state === 'reclaimed');
    }
    const stats = rt.allocator('cpu').memoryStats() as unknown as Record<string, number>;
    expect(stats['pinned.all.current'], 'storages LMS counts pinned').to.equal(1);
    expect(stats['pinned_bytes.all.current'], 'bytes LMS counts pinned').to.equal(s.active.byteLength);
    const live: DataPtr[] = liveStorages(s)
      .filter((storage) => storage.lms!.state !== 'reclaimed')
      .map((storage) => storage.peekDataPtr());
    assertAllocatorInvariants(rt.allocator('cpu'), live);
    const probe = rt.storage(64);
    assertAllocatorInvariants(rt.allocator('cpu'), [...live, probe.peekDataPtr()]);
    probe.release();
    for (const [storage, seed] of s.seeds) {
      expect(Buffer.from(await rt.read(storage)).equals(Buffer.from(patternBytes(storage.byteLength, seed))), `the bytes of the ${storage.byteLength}-byte storage`).to.equal(true);
    }
  }

  /** Releases the scene: every storage, the guard first; the allocator then holds nothing. */
  function releaseScene(s: Scene): void {
    s.guard.release();
    for (const storage of liveStorages(s)) storage.release();
    expect(rt.allocator('cpu').memoryStats()['allocation.all.current'], 'allocations left once the scene is released').to.equal(0);
  }

  /** Runs `call` on a fresh scene per generated case, releasing what it made (a guard, the pin of a storage). */
  async function checkEntry(name: string, arguments_: (s: Scene) => fc.Arbitrary<unknown[]>, call: (s: Scene, a: unknown[]) => unknown, undo: (s: Scene, a: unknown[], made: unknown) => void = () => {}): Promise<void> {
    // The arbitrary needs the scene's storages: generate indices into a scene made per case.
    const probe = scene();
    const arbitrary = arguments_(probe);
    const values = plausible(probe);
    releaseScene(probe);
    await fc.assert(
      fc.asyncProperty(arbitrary, async (a) => {
        const s = scene();
        try {
          const now = plausible(s);
          const args = a.map((x) => (values.includes(x) ? now[values.indexOf(x)] : x));
          let threw = true;
          const made = await expectTypedOrSuccess(name, async () => {
            const result = await call(s, args);
            threw = false;
            return result;
          });
          if (made instanceof PinGuard) made.release();
          else if (!threw) undo(s, args, made);
          await expectConsistent(s);
        } finally {
          releaseScene(s);
        }
      }),
      RUNS,
    );
  }

  /** Mostly the values an option takes (right or nearly so), sometimes junk: most cases get to make a runtime. */
  const option = (values: unknown[]): fc.Arbitrary<unknown> => fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...values) }, { weight: 1, arbitrary: junk() });
  const optionValues = fc.record(
    {
      policy: option(['lru', 'best-fit', 'speculative', 'LRU', ...wrongPolicies]),
      devices: option([['cpu'], ['cpu', 'cuda'], ['cpu:0'], ['CPU'], ['gpu!'], []]),
      speculation: option([true, false, { pageOut: true }, { prefetch: 'yes' }, { history: 0 }, { lookahead: 2.5 }, { history: 2, lookahead: 4 }]),
    },
    { requiredKeys: [] },
  );
  const validOptions = fc.record(
    {
      policy: fc.constantFrom('lru', 'best-fit', 'speculative'),
      devices: fc.constantFrom(['cpu'], ['cpu', 'cuda']),
      speculation: fc.constantFrom(true, false, { pageOut: true }, { history: 2, lookahead: 4 }),
    },
    { requiredKeys: [] },
  );

  it('lms() gives a typed error or a plugin, and a runtime made with it pages consistently', async () => {
    let paged = 0; // runtimes whose LMS reclaimed something: the policy was asked
    await fc.assert(
      // Valid options that page on cpu come often enough that the consistency checks below always run on paging
      // runtimes (about a third of the runs; mixed and junk options alone left it near a tenth).
      fc.asyncProperty(fc.oneof({ weight: 3, arbitrary: optionValues }, { weight: 2, arbitrary: validOptions }, { weight: 1, arbitrary: junk() }), async (options) => {
        const plugin = await expectTypedOrSuccess('lms', () => lms(options as never));
        if (plugin === undefined) return;
        // The plugin registers; the first paging allocator checks a registered policy; reclaims check its choices.
        const made = await expectTypedOrSuccess('createRuntime with lms()', () => createRuntime({ plugins: [cpu({ limit: '2MiB' }), plugin as never] }));
        if (made === undefined) return;
        const other = made as Runtime;
        try {
          const storages: StorageImpl[] = [];
          for (let i = 0; i < 6; i++) {
            const storage = await expectTypedOrSuccess('Runtime#storage under lms()', () => other.storage(512 * KiB));
            if (storage === undefined) continue;
            storages.push(storage as StorageImpl);
            await expectTypedOrSuccess('pin under lms()', () => pin(storage as StorageImpl).release());
          }
          await expectTypedOrSuccess('LmsController#reclaimInactive under lms()', () => resolve(other.container, LmsController).reclaimInactive());
          if (((other.allocator('cpu').memoryStats() as unknown as Record<string, number>)['reclaimed'] ?? 0) > 0) paged++;
          for (const storage of storages) if (storage.lms?.state !== 'active') storage.release();
          assertAllocatorInvariants(other.allocator('cpu'), storages.filter((s) => !s.isReleased).map((s) => s.peekDataPtr()));
        } finally {
          await other.dispose();
        }
      }),
      RUNS,
    );
    expect(paged, 'runtimes that paged').to.be.at.least(RUNS.numRuns / 10);
  });

  it('pin gives a typed error or a guard, and pins nothing once it threw or its guard is released', async () => {
    await checkEntry('pin', (s) => junkArgs(4, plausible(s)), (_, a) => pin(...(a as StorageImpl[])));
  });

  it('pinAsync gives a typed error or a guard, and pins nothing once it rejected or its guard is released', async () => {
    await checkEntry('pinAsync', (s) => junkArgs(4, plausible(s)), (_, a) => pinAsync(...(a as StorageImpl[])));
  });

  it('PinGuard#release and [Symbol.dispose] ignore junk, are idempotent, and unpin once', async () => {
    await checkEntry('PinGuard#release', (s) => junkArgs(3, plausible(s)), (s, a) => {
      const guard = pin(s.inactive, s.reclaimed, s.inactive);
      const release = guard.release as (...x: unknown[]) => void;
      release.apply(guard, a);
      (guard[Symbol.dispose] as (...x: unknown[]) => void).apply(guard, a);
      expect(guard.isHeld).to.equal(false);
    });
  });

  const controllerCalls: [string, number, (c: LmsController, a: unknown[]) => unknown][] = [
    ['LmsController#device', 1, (c, a) => c.device(a[0] as never)],
    ['LmsController#reclaimInactive', 1, (c, a) => c.reclaimInactive(a[0] as never)],
    ['LmsController#endIteration', 2, (c, a) => (c.endIteration as (...x: unknown[]) => void)(...a)],
    ['LmsController#policy', 0, (c) => c.policy],
    ['LmsController#speculation', 0, (c) => c.speculation],
  ];
  for (const [name, arity, call] of controllerCalls) {
    it(`${name} gives a typed error or succeeds, and leaves every storage as it was or reclaimed`, async () => {
      await checkEntry(name, (s) => junkArgs(arity, plausible(s)), (_, a) => call(controller, a));
    });
  }

  // A storage's LMS object, as `storage.lms` hands it out; what a call pinned the test unpins.
  const residencyCalls: [string, (r: StorageResidency, a: unknown[]) => unknown, ((r: StorageResidency) => void)?][] = [
    ['StorageResidency#pin', (r, a) => (r.pin as (...x: unknown[]) => void)(...a), (r) => r.unpin()],
    ['StorageResidency#unpin', (r, a) => (r.unpin as (...x: unknown[]) => void)(...a), (r) => r.pin()],
    ['StorageResidency#access', (r, a) => r.access(a[0] as boolean)],
    ['StorageResidency#ready', (r) => r.ready()],
    ['StorageResidency#hostCopySettled', (r) => r.hostCopySettled()],
    ['StorageResidency#readHostCopy', (r) => r.readHostCopy()],
    ['StorageResidency#pageOutEarly', (r) => r.pageOutEarly()],
    ['StorageResidency#prefetch', (r) => r.prefetch()],
    ['StorageResidency#reclaim', (r) => r.reclaim()],
    ['StorageResidency#release', (r, a) => (r.release as (...x: unknown[]) => void)(...a)],
  ];
  for (const [name, call, undo] of residencyCalls) {
    it(`${name} gives a typed error or succeeds on a storage in any state, and leaves LMS consistent`, async () => {
      const which = fc.constantFrom<keyof Scene>('reclaimed', 'inactive', 'active', 'allocated', 'released', 'tensor');
      await checkEntry(
        name,
        (s) => fc.tuple(which, junkArgs(2, plausible(s))).map(([w, a]) => [w, ...a]),
        (s, [w, ...a]) => {
          const item = s[w as 'reclaimed'] as StorageImpl | TensorImpl;
          const storage = item instanceof TensorImpl ? item.storage : item;
          return call(storage.lms as StorageResidency, a);
        },
        (s, [w]) => {
          const item = s[w as 'reclaimed'] as StorageImpl | TensorImpl;
          const storage = item instanceof TensorImpl ? item.storage : item;
          undo?.(storage.lms as StorageResidency);
        },
      );
    });
  }
});
