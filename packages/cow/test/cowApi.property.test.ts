import { expect } from 'chai';
import fc from 'fast-check';
import type { Runtime } from '@stowage/core';
import { cpu, createRuntime, StorageImpl, TensorImpl } from '@stowage/core';
import { expectTypedOrSuccess, junkArgs } from '@stowage/core/testing';
import { collectSharedCow, cow, CowReshapePolicy, isCowDataPtr, lazyClone, materialize, receiveCow, shareCow, WarnReshapePolicy } from '@stowage/cow';

// Note [The public API under junk] (core's test/publicApi.property.test.ts), for cow's entry points: a typed
// StowageError or success, never another error, and the runtime's allocator still serving afterwards.
describe("cow's public API under junk", () => {
  let rt: Runtime;
  let mine: StorageImpl[];
  beforeEach(async () => {
    rt = await createRuntime({ plugins: [cpu({ shared: true }), cow()] });
    mine = [rt.storage(16, { shared: true }), rt.storage(8)];
  });
  afterEach(async () => {
    await rt.dispose();
  });

  const entries: [string, (rt: Runtime, a: unknown[]) => unknown][] = [
    ['cow', (_, a) => cow(a[0] as object)],
    ['lazyClone', (_, a) => lazyClone(a[0] as StorageImpl)],
    ['materialize', (_, a) => materialize(a[0] as StorageImpl)],
    ['isCowDataPtr', (_, a) => isCowDataPtr(a[0] as never)],
    ['shareCow', (r, a) => shareCow(a[0] as Runtime, a[1] as StorageImpl)],
    ['shareCow(rt, junk)', (r, a) => shareCow(r, a[0] as StorageImpl)],
    ['receiveCow(rt, junk)', (r, a) => receiveCow(r, a[0] as never)],
    ['collectSharedCow', (_, a) => collectSharedCow(a[0] as Runtime)],
    ['CowReshapePolicy#reshape', (_, a) => new CowReshapePolicy().reshape(a[0] as TensorImpl, a[1] as number[])],
    ['WarnReshapePolicy#reshape', (_, a) => new WarnReshapePolicy().reshape(a[0] as TensorImpl, a[1] as number[])],
  ];
  for (const [name, call] of entries) {
    it(`${name} gives a typed error or succeeds, and leaves the allocator consistent`, async () => {
      await fc.assert(
        fc.asyncProperty(junkArgs(3, [rt, ...mine, rt.tensor([2, 2]), [4], [2, 2]]), async (a) => {
          const made = await expectTypedOrSuccess(name, () => call(rt, a));
          if (made instanceof StorageImpl && !mine.includes(made)) made.release();
          const probe = rt.storage(64);
          expect(probe.byteLength, 'the next allocation works').to.equal(64);
          probe.release();
          const stats = rt.allocator('cpu').memoryStats();
          expect(stats['allocated_bytes.all.current'], 'allocated within reserved').to.be.at.most(stats['reserved_bytes.all.current']);
        }),
        { numRuns: 100 },
      );
    });
  }
});
