import { expect } from 'chai';
import { MessageChannel } from 'node:worker_threads';
import type { Runtime, StorageImpl } from '@stowage/core';
import { cpu, createRuntime, InvalidArgumentError, OutOfMemoryError, UseAfterReleaseError } from '@stowage/core';
import { Ipc, ipc, ipcCollect, ipcOf, LIMBO_WARNING_CODE } from '@stowage/ipc';
import { RefCounterClient, RefCounterFiles } from '@stowage/ipc/testing';

import { shmExists, shmObjects } from './childProcess.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A view of the storage's bytes that outlives the storage (the allocator's segment). */
function bytesOf(s: StorageImpl): Uint8Array {
  const p = s.peekDataPtr();
  return new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength);
}

function fill(rt: Runtime, s: StorageImpl, value: number): void {
  rt.write(s, new Uint8Array(s.byteLength).fill(value));
}

const allocated = (rt: Runtime): number => rt.allocator('cpu').memoryStats()['allocated_bytes.all.current'];
const limboStat = (rt: Runtime): number | undefined => rt.allocator('cpu').memoryStats().limbo_bytes;

describe('Ipc', () => {
  let rt: Runtime;
  let consumer: RefCounterClient;
  beforeEach(async () => {
    rt = await createRuntime({ plugins: [ipc()] });
    consumer = new RefCounterClient({ threadId: 77 }); // stands for a worker of this process
  });
  afterEach(async () => {
    consumer.close();
    await rt.dispose();
  });
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  describe('ipc()', () => {
    it('registers the service under Ipc, the IpcCollector and the producer counters', () => {
      const service = ipcOf(rt);
      expect(rt.container.resolve(Ipc)).to.equal(service);
      expect(rt.container.resolve(RefCounterFiles)).to.equal(service.counters);
      expect(limboStat(rt)).to.equal(0);
    });

    it('refuses unknown options and bad values with InvalidArgumentError', () => {
      expect(() => ipc({ limboWarningBytes: -1 })).to.throw(InvalidArgumentError);
      expect(() => ipc({ slotsPerFile: 0 })).to.throw(InvalidArgumentError);
      expect(() => ipc({ limboWarningByte: 1 } as never)).to.throw(InvalidArgumentError);
    });
  });

  describe('Ipc#send', () => {
    it('keeps a storage released while referenced allocated, bytes intact, and frees it once the count is 0 and a collection runs', () => {
      const service = ipcOf(rt);
      const s = rt.storage(4 * KiB);
      fill(rt, s, 7);
      const view = bytesOf(s);
      const slot = service.send(s);
      consumer.acquire(slot);
      const before = allocated(rt);
      s.release();
      expect(service.limboBytes()).to.equal(4 * KiB);
      expect(limboStat(rt)).to.equal(4 * KiB);
      expect(allocated(rt)).to.equal(before, 'still allocated');
      // Were the block freed, the engine would hand it out again here.
      const others = [rt.storage(4 * KiB), rt.storage(4 * KiB)];
      for (const o of others) fill(rt, o, 0xff);
      expect(view.every((b) => b === 7)).to.equal(true, 'the consumer still reads what was sent');
      consumer.release(slot);
      expect(service.limboBytes()).to.equal(4 * KiB, 'nothing collects by itself until a trigger');
      expect(ipcCollect(rt)).to.equal(4 * KiB);
      expect(service.limboBytes()).to.equal(0);
      expect(limboStat(rt)).to.equal(0);
      expect(allocated(rt)).to.equal(before + 8 * KiB - 4 * KiB);
      expect(() => service.counters.count(slot)).to.throw(UseAfterReleaseError, /after done/);
      for (const o of others) o.release();
    });

    it('frees at once a storage whose consumers are done before its release', () => {
      const service = ipcOf(rt);
      const s = rt.storage(4 * KiB);
      const slot = service.send(s);
      consumer.acquire(slot);
      consumer.release(slot);
      const before = allocated(rt);
      s.release();
      expect(service.limboBytes()).to.equal(0);
      expect(allocated(rt)).to.equal(before - 4 * KiB);
    });

    it('gives each send of one storage its own slot and frees it when every slot is at 0', () => {
      const service = ipcOf(rt);
      const s = rt.storage(4 * KiB);
      const a = service.send(s);
      const b = service.send(s);
      expect(a).to.not.deep.equal(b);
      const other = new RefCounterClient({ threadId: 78 });
      consumer.acquire(a);
      other.acquire(b);
      s.release();
      consumer.release(a);
      expect(ipcCollect(rt)).to.equal(0, 'b is still held');
      other.release(b);
      other.close();
      expect(ipcCollect(rt)).to.equal(4 * KiB);
    });

    it('finishes the slots of a storage sent over and over as its consumers release them, so its counter files do not pile up', async () => {
      const local = await createRuntime({ plugins: [ipc({ slotsPerFile: 4 })] });
      try {
        const service = ipcOf(local);
        const s = local.storage(64);
        const names = new Set<string>();
        for (let i = 0; i < 40; i++) {
          const slot = service.send(s);
          names.add(slot.file);
          consumer.acquire(slot);
          consumer.release(slot);
        }
        expect(names.size, 'ten files of 4 slots were used').to.equal(10);
        expect(service.counters.fileNames.length, 'full files whose slots are all done are unlinked').to.be.at.most(2);
        expect([...names].filter(shmExists).length, 'left in /dev/shm').to.be.at.most(2);
        s.release();
        expect(service.limboBytes(), 'its consumers are done: freed at once').to.equal(0);
      } finally {
        await local.dispose();
      }
    });

    it('collects the limbo when any sent storage is released', () => {
      const service = ipcOf(rt);
      const s = rt.storage(4 * KiB);
      const slot = service.send(s);
      consumer.acquire(slot);
      s.release();
      consumer.release(slot);
      expect(service.limboBytes()).to.equal(4 * KiB);
      const t = rt.storage(8 * KiB);
      const inFlight = service.send(t); // sent, not received: t goes to the limbo, s is collected
      t.release();
      expect(service.limboBytes()).to.equal(8 * KiB);
      // What a consumer's queue does at close() with a descriptor it never got: the count goes back to 0.
      service.dropReference(inFlight);
      expect(ipcCollect(rt)).to.equal(8 * KiB);
    });

    it('refuses a released storage, something that is not a storage, and a pointer no allocator owns', () => {
      const service = ipcOf(rt);
      const s = rt.storage(16);
      s.release();
      expect(() => service.send(s)).to.throw(UseAfterReleaseError);
      expect(() => service.send({} as StorageImpl)).to.throw(InvalidArgumentError, /StorageImpl/);
      const t = rt.storage(16);
      const p = t.peekDataPtr();
      expect(p.compareExchangeDeleter(p.deleter, () => {}, null)).to.equal(true); // as an importer would own it
      expect(() => service.send(t)).to.throw(InvalidArgumentError, /copy it into a new storage/);
      t.release();
    });
  });

  describe('Ipc#receive', () => {
    it('refuses a descriptor checkStorageDescriptor refuses, or an rt that is not a Runtime, with InvalidArgumentError naming it; nothing is held', () => {
      const service = ipcOf(rt);
      expect(() => service.receive(rt, undefined as never)).to.throw(InvalidArgumentError, /descriptor must be a StorageDescriptor/);
      expect(() => service.receive(rt, { device: 'cpu:0', memory: null } as never)).to.throw(InvalidArgumentError, /descriptor\.memory/);
      expect(() => service.receive({} as Runtime, undefined as never)).to.throw(InvalidArgumentError, /rt must be a Runtime/);
      expect(service.client.mappedFiles).to.equal(0);
    });
  });

  describe('Ipc#exportTaken, #watchThread and #threadEnded', () => {
    it('refuse what is not a slot, a thread id or a MessagePort with InvalidArgumentError, watching nothing (the runtime disposes cleanly after)', () => {
      const service = ipcOf(rt);
      const channel = new MessageChannel();
      for (const slot of [undefined, null, 5, { file: 1, slot: 0 }, { file: '/x' }]) expect(() => service.exportTaken(slot as never), String(slot)).to.throw(InvalidArgumentError, /slot must be a counter slot/);
      expect(() => service.exportTaken({ file: '/stowage-ipc-none', slot: 0 }), 'a slot with nothing open is ignored').to.not.throw();
      for (const threadId of [-1, 1.5, '7', undefined]) {
        expect(() => service.watchThread(threadId as number, channel.port1), String(threadId)).to.throw(InvalidArgumentError, /threadId must be an integer/);
        expect(() => service.threadEnded(threadId as number), String(threadId)).to.throw(InvalidArgumentError, /threadId must be an integer/);
      }
      expect(() => service.watchThread(7, {} as never)).to.throw(InvalidArgumentError, /port must be a worker_threads MessagePort/);
      channel.port1.close();
    });
  });

  describe('IpcCollector', () => {
    it('the out-of-memory chain collects the limbo, so an allocation that only fits after collection succeeds', async () => {
      await rt.dispose();
      rt = await createRuntime({ plugins: [cpu({ limit: '2MiB' }), ipc()] });
      const service = ipcOf(rt);
      const a = rt.storage(1 * MiB);
      const b = rt.storage(1 * MiB);
      const slot = service.send(a);
      consumer.acquire(slot);
      a.release();
      expect(() => rt.storage(1 * MiB), 'held by a consumer: not collectable').to.throw(OutOfMemoryError);
      consumer.release(slot);
      expect(service.limboBytes()).to.equal(1 * MiB);
      const c = rt.storage(1 * MiB);
      expect(service.limboBytes()).to.equal(0);
      b.release();
      c.release();
    });
  });

  describe('ipcCollect', () => {
    it('returns 0 with nothing to collect, and refuses a runtime without ipc()', async () => {
      expect(ipcCollect(rt)).to.equal(0);
      const plain = await createRuntime();
      expect(() => ipcCollect(plain)).to.throw(InvalidArgumentError, /ipc\(\) plugin/);
      await plain.dispose();
    });
  });

  describe('limbo warning', () => {
    it('warns once when the limbo passes limboWarningBytes, and again after it fell back', async () => {
      await rt.dispose();
      rt = await createRuntime({ plugins: [ipc({ limboWarningBytes: 6 * KiB })] });
      const service = ipcOf(rt);
      const warnings: Error[] = [];
      const listen = (w: Error): void => void ((w as Error & { code?: string }).code === LIMBO_WARNING_CODE && warnings.push(w));
      process.on('warning', listen);
      try {
        const hold = (): void => {
          const s = rt.storage(4 * KiB);
          consumer.acquire(service.send(s));
          s.release();
        };
        hold();
        hold(); // 8 KiB > 6 KiB
        hold();
        await new Promise((r) => setImmediate(r));
        expect(warnings).to.have.length(1);
        expect(warnings[0]!.message).to.match(/12288 bytes|8192 bytes/);
        expect(warnings[0]!.name).to.equal('StowageIpcWarning');
        consumer.close(); // releases every slot
        consumer = new RefCounterClient({ threadId: 77 });
        expect(ipcCollect(rt)).to.equal(12 * KiB);
        hold();
        hold();
        await new Promise((r) => setImmediate(r));
        expect(warnings).to.have.length(2);
      } finally {
        process.off('warning', listen);
      }
    });
  });

  describe('Runtime#dispose', () => {
    it('unlinks the counter files even with allocations still in the limbo', async () => {
      const service = ipcOf(rt);
      const s = rt.storage(4 * KiB);
      consumer.acquire(service.send(s));
      s.release();
      expect(service.counters.fileNames).to.have.length(1);
      await rt.dispose();
      expect(service.counters.fileNames).to.have.length(0);
      expect(service.limboBytes()).to.equal(0);
    });
  });
});
