import { expect } from 'chai';
import fc from 'fast-check';
import { DisposedError, ForeignPointerError, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import type { CounterSlot } from '@stowage/ipc';
import { RefCounterClient, RefCounterFiles } from '@stowage/ipc/testing';

import { Barrier, Child, fromWire, shmExists, shmObjects, toWire } from './childProcess.js';

describe('RefCounterFiles', function () {
  this.timeout(120_000);
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  describe('RefCounterFiles#allocate', () => {
    it('hands out slots by increasing offset and opens a second file when the first is full', () => {
      using files = new RefCounterFiles({ slotsPerFile: 3 });
      const slots = Array.from({ length: 5 }, () => files.allocate());
      expect(slots.map((s) => s.slot)).to.deep.equal([0, 1, 2, 0, 1]);
      expect(slots[0]!.file).to.equal(slots[2]!.file);
      expect(slots[3]!.file).to.not.equal(slots[2]!.file);
      expect(files.fileNames).to.deep.equal([slots[0]!.file, slots[3]!.file]);
      expect(new Set(slots.map((s) => s.nonce)).size).to.equal(5);
      for (const s of slots) {
        expect(files.count(s)).to.equal(0);
        expect(s.nonce).to.not.equal(0n);
      }
      expect(shmObjects()).to.have.length(2);
    });

    it('refuses after close() with DisposedError', () => {
      const files = new RefCounterFiles();
      files.close();
      files.close();
      expect(() => files.allocate()).to.throw(DisposedError);
    });

    it('refuses bad options with InvalidArgumentError', () => {
      for (const slotsPerFile of [0, -1, 1.5, 2 ** 21]) expect(() => new RefCounterFiles({ slotsPerFile })).to.throw(InvalidArgumentError);
      for (const options of [null, 5, 'big', { slotsPerfile: 8 }]) expect(() => new RefCounterFiles(options as never), String(options)).to.throw(InvalidArgumentError, /options/);
    });
  });

  describe('RefCounterFiles#done', () => {
    it('unlinks a file when its last slot is done and it is full, not before', () => {
      using files = new RefCounterFiles({ slotsPerFile: 2 });
      const a = files.allocate();
      const name = a.file;
      files.done(a);
      expect(shmExists(name), 'not full yet').to.equal(true);
      const b = files.allocate();
      files.increment(b);
      expect(() => files.done(b)).to.throw(InvalidArgumentError, /count is 0 \(it is 1/);
      using client = new RefCounterClient();
      client.acquire(b);
      client.release(b);
      files.done(b);
      expect(shmExists(name)).to.equal(false);
      expect(files.fileNames).to.deep.equal([]);
      expect(() => files.count(b)).to.throw(ForeignPointerError, /already unlinked/);
    });

    it('turns later use of a done slot into UseAfterReleaseError', () => {
      using files = new RefCounterFiles({ slotsPerFile: 4 });
      const a = files.allocate();
      files.done(a);
      expect(() => files.increment(a)).to.throw(UseAfterReleaseError);
      expect(() => files.done(a)).to.throw(UseAfterReleaseError);
    });
  });

  describe('RefCounterFiles#close', () => {
    it('unlinks every file, referenced or not, while a consumer holding a slot can still release it', () => {
      const files = new RefCounterFiles({ slotsPerFile: 2 });
      const slots = [files.allocate(), files.allocate(), files.allocate()];
      files.increment(slots[0]!);
      using client = new RefCounterClient();
      client.acquire(slots[0]!);
      files.close();
      expect(shmObjects()).to.deep.equal([]);
      client.release(slots[0]!);
      expect(() => new RefCounterClient().acquire(slots[2]!)).to.throw(/ENOENT/);
      expect(() => files.increment(slots[0]!)).to.throw(DisposedError);
    });
  });

  describe('RefCounterFiles across processes', () => {
    let child: Child;
    beforeEach(() => {
      child = new Child();
    });
    afterEach(async () => {
      await child.exit();
    });

    it('counts the sends of the producer and the releases of a consumer process', async () => {
      using files = new RefCounterFiles();
      const s = files.allocate();
      for (let i = 0; i < 3; i++) files.increment(s);
      await child.call({ op: 'acquire', slot: toWire(s), times: 3 });
      expect(files.count(s)).to.equal(3);
      await child.call({ op: 'release', slot: toWire(s), times: 2 });
      expect(files.count(s)).to.equal(1);
      await child.call({ op: 'release', slot: toWire(s) });
      expect(files.count(s)).to.equal(0);
      const below = await child.try({ op: 'release', slot: toWire(s) });
      expect(below).to.include({ ok: false, code: 'DOUBLE_FREE' });
      expect(files.count(s)).to.equal(0);
      files.done(s);
    });

    it('loses no update when the producer increments while the consumer releases', async () => {
      using files = new RefCounterFiles();
      using barrier = new Barrier();
      const s = files.allocate();
      const n = 200_000;
      for (let i = 0; i < n; i++) files.increment(s);
      await child.call({ op: 'acquire', slot: toWire(s), times: n });
      const released = child.call({ op: 'release', slot: toWire(s), times: n, barrier: barrier.name });
      barrier.release();
      for (let i = 0; i < n; i++) files.increment(s);
      await released;
      expect(files.count(s)).to.equal(n);
    });

    it('reclaims the references of a consumer killed with SIGKILL, and only those', async () => {
      using files = new RefCounterFiles({ slotsPerFile: 2 });
      const slots = [files.allocate(), files.allocate(), files.allocate()];
      files.increment(slots[0]!);
      files.increment(slots[0]!);
      files.increment(slots[1]!);
      files.increment(slots[2]!);
      files.increment(slots[2]!);
      await child.call({ op: 'acquire', slot: toWire(slots[0]!), times: 2 });
      await child.call({ op: 'acquire', slot: toWire(slots[1]!) });
      await child.call({ op: 'acquire', slot: toWire(slots[2]!) }); // the second send of slot 2 is still in flight
      expect(files.reclaimDead()).to.equal(0);
      await child.kill();
      expect(files.reclaimDead()).to.equal(4);
      expect(slots.map((s) => files.count(s))).to.deep.equal([0, 0, 1]);
      expect(files.reclaimDead()).to.equal(0);
      // The in-flight reference can still be acquired and released by another consumer.
      using client = new RefCounterClient();
      client.acquire(slots[2]!);
      client.release(slots[2]!);
      for (const s of slots) files.done(s);
      expect(files.fileNames).to.have.length(1);
    });

    it('unlinks the file of a producer that died once its consumer releases its last slot', async () => {
      const { slots } = (await child.call({ op: 'produce', n: 2, slotsPerFile: 8 })) as unknown as { slots: { file: string; slot: number; nonce: string }[] };
      const [a, b] = slots.map(fromWire) as [CounterSlot, CounterSlot];
      using client = new RefCounterClient({ idleFiles: 0 });
      client.acquire(a);
      client.acquire(b);
      await child.kill();
      expect(shmExists(a.file)).to.equal(true);
      client.release(a);
      expect(shmExists(a.file)).to.equal(true);
      client.release(b);
      expect(shmExists(a.file)).to.equal(false);
    });
  });

  describe('RefCounterFiles#reclaimDead', () => {
    it('reclaims the references of worker threads the caller says ended, not of live ones', () => {
      using files = new RefCounterFiles();
      const s = files.allocate();
      const t = files.allocate();
      files.increment(s);
      files.increment(t);
      using ended = new RefCounterClient({ threadId: 41 });
      using live = new RefCounterClient({ threadId: 42 });
      ended.acquire(s);
      live.acquire(t);
      expect(files.reclaimDead(new Set([41]))).to.equal(1);
      expect([files.count(s), files.count(t)]).to.deep.equal([0, 1]);
      live.release(t);
    });
  });

  describe('RefCounterFiles with RefCounterClient (property)', () => {
    it('keeps count ≥ 0 and count == sends − releases − reclaimed, and unlinks a file exactly when it is full and all done', () => {
      type Op =
        | { kind: 'allocate' }
        | { kind: 'increment' | 'acquire' | 'release' | 'done' | 'endThread'; pick: number; thread: number };
      const pickOp = fc.record({ pick: fc.nat({ max: 7 }), thread: fc.integer({ min: 1, max: 3 }) });
      const op: fc.Arbitrary<Op> = fc.oneof(
        fc.constant({ kind: 'allocate' as const }),
        ...(['increment', 'acquire', 'release', 'done', 'endThread'] as const).map((kind) => pickOp.map((p) => ({ kind, ...p }))),
      );
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 4 }), fc.array(op, { minLength: 10, maxLength: 150, size: 'max' }), (slotsPerFile, ops) => {
          const files = new RefCounterFiles({ slotsPerFile });
          const clients = new Map<number, RefCounterClient>();
          const client = (thread: number): RefCounterClient => {
            let c = clients.get(thread);
            if (c === undefined) clients.set(thread, (c = new RefCounterClient({ threadId: thread, idleFiles: thread - 1 })));
            return c;
          };
          interface Model {
            readonly slot: CounterSlot;
            sends: number;
            releases: number;
            reclaimed: number;
            acquired: number;
            holder: number;
            done: boolean;
          }
          const model: Model[] = [];
          const fileSlots = new Map<string, Model[]>();
          try {
            for (const o of ops) {
              if (o.kind === 'allocate') {
                const slot = files.allocate();
                const m: Model = { slot, sends: 0, releases: 0, reclaimed: 0, acquired: 0, holder: 0, done: false };
                model.push(m);
                fileSlots.set(slot.file, [...(fileSlots.get(slot.file) ?? []), m]);
                continue;
              }
              const live = model.filter((m) => !m.done);
              if (o.kind === 'endThread') {
                const reclaimed = files.reclaimDead(new Set([o.thread]));
                let expected = 0;
                for (const m of live) {
                  if (m.holder !== o.thread) continue;
                  const held = m.acquired - m.releases;
                  expected += held;
                  m.reclaimed += held;
                  m.acquired -= held; // the holder's acquisitions are gone with it
                  m.holder = 0;
                }
                expect(reclaimed).to.equal(expected);
                clients.get(o.thread)?.close();
                clients.delete(o.thread);
                continue;
              }
              const m = live[o.pick % Math.max(live.length, 1)];
              if (m === undefined) continue;
              const c = client(o.thread);
              const outstanding = m.sends - m.releases - m.reclaimed;
              if (o.kind === 'increment') {
                files.increment(m.slot);
                m.sends++;
              } else if (o.kind === 'acquire') {
                const held = m.acquired - m.releases;
                const ok = (m.holder === 0 || m.holder === o.thread) && held < outstanding;
                if (ok) {
                  c.acquire(m.slot);
                  m.acquired++;
                  m.holder = o.thread;
                } else {
                  expect(() => c.acquire(m.slot)).to.throw(m.holder !== 0 && m.holder !== o.thread ? ForeignPointerError : InvalidArgumentError);
                }
              } else if (o.kind === 'release') {
                const held = m.acquired - m.releases;
                if (m.holder === o.thread && held > 0) {
                  c.release(m.slot);
                  m.releases++;
                } else {
                  expect(() => c.release(m.slot)).to.throw();
                }
              } else if (outstanding === 0) {
                files.done(m.slot);
                m.done = true;
              } else {
                expect(() => files.done(m.slot)).to.throw(InvalidArgumentError);
              }
              // Invariants after every step, for every slot still readable.
              for (const x of model) {
                if (x.done) continue;
                const count = files.count(x.slot);
                expect(count).to.be.at.least(0);
                expect(count).to.equal(x.sends - x.releases - x.reclaimed);
              }
              for (const [file, slots] of fileSlots) {
                const retired = slots.length === slotsPerFile && slots.every((x) => x.done);
                expect(shmExists(file), file).to.equal(!retired);
              }
            }
          } finally {
            for (const c of clients.values()) c.close();
            files.close();
          }
          for (const file of fileSlots.keys()) expect(shmExists(file)).to.equal(false);
        }),
        { numRuns: 300 },
      );
    });
  });
});
