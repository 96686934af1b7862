import { expect } from 'chai';
import fc from 'fast-check';
import { MessageChannel } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';

import type { Runtime, StorageImpl } from '@stowage/core';
import { cpu, createRuntime } from '@stowage/core';
import { assertAllocatorInvariants, expectTypedOrSuccess, junk, junkArgs } from '@stowage/core/testing';
import type { CounterSlot, Ipc } from '@stowage/ipc';
import { ipc, ipcCollect, ipcOf, ReceivedStorage, StorageQueue } from '@stowage/ipc';
import { checkStorageDescriptor, RefCounterClient, RefCounterFiles, SharedMemoryFile } from '@stowage/ipc/testing';

import { shmObjects } from './childProcess.js';

// Note [The public API under junk] (core's test/publicApi.property.test.ts), for IPC's entry points: ipc() options,
// ipcOf/ipcCollect, the Ipc service's members, StorageQueue over a MessageChannel within this thread (its
// constructor, put, get of whatever arrives, close), and the testing entry's shared-memory files, counter files,
// counter client and descriptor check. Each call, fed junk with real storages, slots, ports and descriptors mixed
// in, succeeds or throws a StowageError with a code, never another error, and no listener throws (a port's message
// handler that threw would end the process). Afterwards, once what the call made is released and the queues
// closed, the producer's limbo empties, its allocator holds nothing and still allocates, and no shared-memory
// object of this process is left.

const RUNS = { numRuns: 100 };

/** Mostly one of `values` (right, or nearly so), sometimes junk: most calls get past their first check. */
const mostly = (values: unknown[]): fc.Arbitrary<unknown> => fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...values) }, { weight: 1, arbitrary: junk() });
/** What an options parameter gets: an object right or wrong, or something that is not an object at all. */
const optionsArg = (values: unknown[]): fc.Arbitrary<unknown> => fc.oneof(fc.constantFrom(undefined, null, 5, 'yes', [], {}, { nope: 1 }, ...values), junk());

/** `promise`'s value, or undefined when it has not settled within `ms` (a get() that waits for a message that never comes). */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** Releases what a call made that holds memory or a reference. */
function releaseMade(made: unknown): void {
  if (made instanceof ReceivedStorage) made.release();
  else if (made instanceof StorageQueue) made.close();
  else if (made instanceof SharedMemoryFile) {
    made.unlink();
    made.close();
  } else if (made instanceof RefCounterFiles || made instanceof RefCounterClient) made.close();
}

/**
 * Descriptor-like objects (what a forged or corrupt message carries): the right descriptor of 64 bytes of `buffer`
 * with `slot`, from thread 7 of this process; the same with one field wrong; every field right, nearly right or
 * junk; or junk.
 */
function descriptors(slot: CounterSlot, buffer: SharedArrayBuffer): fc.Arbitrary<unknown> {
  const values: Record<string, unknown[]> = {
    device: ['cpu:0', 'cuda:0', 'cuda:99999', 'cpu'],
    memory: [
      { kind: 'sab', buffer, byteOffset: 0 },
      { kind: 'sab', buffer, byteOffset: 2 ** 40 },
      { kind: 'sab', buffer: new ArrayBuffer(8), byteOffset: 0 },
      { kind: 'shm', name: '/stowage-ipc-none', inode: 1, byteOffset: 0 },
      { kind: 'shm', name: 'no-slash', inode: 1, byteOffset: 0 },
      { kind: 'cuda', exported: { kind: 'legacy', device: 0, handle: new Uint8Array(64), offset: 0, byteLength: 64 }, byteOffset: 0 },
      { kind: 'cuda', exported: { kind: 'shareable', device: 0, pageBytes: 2 ** 21, fds: [1e9], offset: 0, byteLength: 64 }, byteOffset: 0 },
      { kind: 'cuda', exported: null, byteOffset: 0 },
    ],
    byteLength: [64, 0, 2 ** 53, -1],
    tensor: [undefined, { dtype: 'float32', sizes: [4], strides: [1], storageOffset: 0 }, { dtype: 'float32', sizes: [4, 4], strides: [1], storageOffset: 0 }, { dtype: 'no', sizes: [], strides: [], storageOffset: 0 }],
    slot: [slot, { ...slot, nonce: slot.nonce ^ 1n }, { ...slot, slot: 1 << 20 }, { file: '/stowage-ipc-none', slot: 0, nonce: 5n }, { ...slot, nonce: 0n }],
    producer: [{ pid: process.pid, threadId: 7 }, { pid: process.pid, threadId: 0 }, { pid: 1, threadId: 0 }, { pid: -1, threadId: 0 }],
  };
  const right: Record<string, unknown> = { device: 'cpu:0', memory: values.memory![0], byteLength: 64, slot, producer: values.producer![0] };
  const field = (key: string): fc.Arbitrary<unknown> => fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...values[key]!) }, { weight: 1, arbitrary: junk() });
  const oneWrong = fc.constantFrom(...Object.keys(values)).chain((key) => field(key).map((value) => ({ ...right, [key]: value })));
  const anyFields = fc.record(Object.fromEntries(Object.keys(values).map((key) => [key, field(key)])), { requiredKeys: ['device', 'memory', 'byteLength', 'slot', 'producer'] });
  return fc.oneof({ weight: 2, arbitrary: fc.constant(right) }, { weight: 4, arbitrary: oneWrong }, { weight: 2, arbitrary: anyFields }, { weight: 1, arbitrary: junk() });
}

describe("ipc's public API under junk", function () {
  this.timeout(60_000);
  let rt: Runtime;
  let consumerRt: Runtime;
  let plain: Runtime;
  beforeEach(async () => {
    rt = await createRuntime({ plugins: [cpu({ shared: true }), ipc({ deadCheckIntervalMs: 0 })] });
    consumerRt = await createRuntime({ plugins: [cpu({ shared: true }), ipc({ deadCheckIntervalMs: 0 })] });
    plain = await createRuntime();
  });
  afterEach(async () => {
    await rt.dispose();
    await consumerRt.dispose();
    await plain.dispose();
  });
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  /** The producer's limbo empties once everything is released, its allocator holds nothing, and it still allocates. */
  function expectCollected(runtime: Runtime, held: readonly StorageImpl[]): void {
    ipcCollect(runtime);
    const live = held.filter((s) => !s.isReleased).map((s) => s.peekDataPtr());
    assertAllocatorInvariants(runtime.allocator('cpu'), live);
    const probe = runtime.storage(64);
    assertAllocatorInvariants(runtime.allocator('cpu'), [...live, probe.peekDataPtr()]);
    probe.release();
  }

  function expectEmpty(runtime: Runtime): void {
    expect(ipcCollect(runtime) >= 0).to.equal(true);
    expect(ipcOf(runtime).limboSize, 'allocations left in the limbo').to.equal(0);
    expect(runtime.allocator('cpu').memoryStats()['allocation.all.current'], 'allocations left').to.equal(0);
  }

  it('ipc() gives a typed error or a plugin, and a runtime made with it sends and collects', async () => {
    const option = (values: unknown[]): fc.Arbitrary<unknown> => fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...values) }, { weight: 1, arbitrary: junk() });
    const options = fc.record(
      {
        limboWarningBytes: option([0, 1024, Infinity, -1, Number.NaN, '1GiB']),
        slotsPerFile: option([1, 2, 8, 0, 2.5, 2 ** 21]),
        deadCheckIntervalMs: option([0, 5, -1, Infinity]),
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(fc.oneof({ weight: 3, arbitrary: options }, { weight: 1, arbitrary: junk() }), async (o) => {
        const plugin = await expectTypedOrSuccess('ipc', () => ipc(o as never));
        if (plugin === undefined) return;
        const made = (await expectTypedOrSuccess('createRuntime with ipc()', () => createRuntime({ plugins: [cpu({ shared: true }), plugin as never] }))) as Runtime | undefined;
        if (made === undefined) return;
        try {
          const storages = [made.storage(64), made.storage(64)];
          for (const s of storages) {
            const slot = await expectTypedOrSuccess('Ipc#send', () => ipcOf(made).send(s));
            s.release();
            if (slot !== undefined) ipcOf(made).dropReference(slot as CounterSlot);
          }
          expectEmpty(made);
        } finally {
          await made.dispose();
        }
      }),
      RUNS,
    );
  });

  it('ipcOf and ipcCollect give a typed error or the service, and change nothing', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('ipcOf', 'ipcCollect'), junkArgs(2, [rt, plain, rt.container, { container: rt.container }]), async (name, a) => {
        await expectTypedOrSuccess(name, () => (name === 'ipcOf' ? ipcOf(a[0] as Runtime) : ipcCollect(a[0] as Runtime)));
        expectEmpty(rt);
      }),
      RUNS,
    );
  });

  const ipcCalls: [string, number, (x: Ipc, a: unknown[]) => unknown][] = [
    ['Ipc#send', 1, (x, a) => x.send(a[0] as StorageImpl)],
    ['Ipc#receive', 2, (x, a) => x.receive(a[0] as Runtime, a[1] as never)],
    ['Ipc#collect', 1, (x, a) => x.collect(a[0] as never)],
    ['Ipc#limboBytes', 1, (x, a) => x.limboBytes(a[0] as never)],
    ['Ipc#dropReference', 1, (x, a) => x.dropReference(a[0] as CounterSlot)],
    ['Ipc#exportTaken', 1, (x, a) => x.exportTaken(a[0] as CounterSlot)],
    ['Ipc#holdsSegment', 1, (x, a) => x.holdsSegment(a[0])],
    ['Ipc#watchThread', 2, (x, a) => x.watchThread(a[0] as number, a[1] as MessagePort)],
    // Not thread 0, this one: saying a running thread ended takes its references from under it (documented).
    ['Ipc#threadEnded', 1, (x, a) => (a[0] === 0 ? undefined : x.threadEnded(a[0] as number))],
  ];
  for (const [name, arity, call] of ipcCalls) {
    it(`${name} gives a typed error or succeeds, and the producer still collects everything it sent`, async () => {
      const probeSlot = ipcOf(consumerRt).counters.allocate();
      await fc.assert(
        fc.asyncProperty(junkArgs(arity, ['port', 'descriptor', 'sent', 'shared', 'unshared', 'released', rt, consumerRt, plain, 'cpu', { type: 'cpu', index: 0 }, 7, probeSlot]), async (generated) => {
          // A scene per case: a storage sent to consumerRt (its descriptor), a shared one, one not shared, one released.
          const sent = rt.storage(64, { shared: true });
          const shared = rt.storage(32, { shared: true });
          const unshared = rt.storage(16);
          const released = rt.storage(8);
          released.release();
          const slot = ipcOf(rt).send(sent);
          const ptr = sent.peekDataPtr();
          const descriptor = { device: 'cpu:0', memory: { kind: 'sab', buffer: ptr.handle, byteOffset: ptr.byteOffset }, byteLength: 64, slot, producer: { pid: process.pid, threadId: 7 } };
          const channel = new MessageChannel();
          const scene: Record<string, unknown> = { port: channel.port1, descriptor, sent: slot, shared, unshared, released };
          const a = generated.map((x) => (typeof x === 'string' && Object.hasOwn(scene, x) ? scene[x] : x));
          const x = ipcOf(rt);
          const made = await expectTypedOrSuccess(name, () => call(x, a));
          releaseMade(made);
          if (name === 'Ipc#send' && made !== undefined) x.dropReference(made as CounterSlot);
          channel.port2.close();
          channel.port1.close();
          x.dropReference(slot); // the scene's own send, never received
          expectCollected(rt, [shared, unshared, sent]);
          for (const s of [sent, shared, unshared]) s.release();
          expectEmpty(rt);
        }),
        RUNS,
      );
    });
  }

  it('new StorageQueue gives a typed error or a queue, and a queue made closes cleanly', async () => {
    await fc.assert(
      fc.asyncProperty(fc.tuple(mostly([rt, rt, plain]), mostly(['port']), optionsArg([{ batch: true }, { batch: false }, { batch: 'yes' }, { bach: true }])), async (generated) => {
        const channel = new MessageChannel();
        const a = generated.map((x) => (x === 'port' ? channel.port1 : x));
        const made = await expectTypedOrSuccess('new StorageQueue', () => new StorageQueue(a[0] as Runtime, a[1] as MessagePort, a[2] as object));
        releaseMade(made);
        channel.port1.close();
        channel.port2.close();
        expectEmpty(rt);
      }),
      RUNS,
    );
  });

  it('StorageQueue#put gives a typed error or a descriptor; what it put is got (refused: same thread) or given back at close', async () => {
    let puts = 0;
    await fc.assert(
      fc.asyncProperty(junkArgs(2, ['shared', 'unshared', 'released', 'tensor', 'other', 'received', rt]), async (generated) => {
        const channel = new MessageChannel();
        const producer = new StorageQueue(rt, channel.port1);
        const consumer = new StorageQueue(consumerRt, channel.port2);
        const shared = rt.storage(64, { shared: true });
        const unshared = rt.storage(16);
        const released = rt.storage(8, { shared: true });
        released.release();
        const tensor = rt.tensor([2, 2], { shared: true });
        const other = consumerRt.storage(32, { shared: true });
        const scene: Record<string, unknown> = { shared, unshared, released, tensor, other };
        const a = generated.map((x) => (typeof x === 'string' && Object.hasOwn(scene, x) ? scene[x] : x));
        const put = (producer.put as (...x: unknown[]) => unknown).bind(producer);
        const made = await expectTypedOrSuccess('StorageQueue#put', () => put(...a));
        if (made !== undefined) {
          puts++;
          // Within one thread the consumer refuses it, giving its reference back (a typed error, never another).
          const got = await within(expectTypedOrSuccess('StorageQueue#get', () => consumer.get()), 1000);
          releaseMade(got);
        }
        producer.close();
        consumer.close();
        for (const s of [shared, unshared, tensor.storage, other]) s.release();
        expectEmpty(rt);
        expectEmpty(consumerRt);
      }),
      RUNS,
    );
    expect(puts, 'puts that succeeded').to.be.at.least(RUNS.numRuns / 10);
  });

  it('StorageQueue#get gives a typed error or a storage for whatever arrives, and no message makes a listener throw', async () => {
    const counters = ipcOf(rt).counters;
    const probe = counters.allocate();
    const buffer = new SharedArrayBuffer(64);
    const messages = fc.oneof(
      { weight: 3, arbitrary: descriptors(probe, buffer).map((descriptor) => ({ stowage: 'ipc.storage', descriptor })) },
      { weight: 1, arbitrary: fc.array(descriptors(probe, buffer), { maxLength: 3 }).map((d) => ({ stowage: 'ipc.storages', descriptors: d })) },
      { weight: 1, arbitrary: fc.record({ stowage: fc.constantFrom('ipc.hello', 'ipc.ack', 'ipc.close', 'ipc.storages', 'ipc.nope'), pid: junk([process.pid]), threadId: junk([0, 7]), alive: junk(['alive']), file: junk([probe.file]), slot: junk([0, 1]), descriptors: junk() }, { requiredKeys: ['stowage'] }) },
      { weight: 1, arbitrary: junk() },
    );
    let received = 0;
    const failures: unknown[] = [];
    const onError = (error: unknown): void => {
      failures.push(error);
    };
    process.on('uncaughtException', onError);
    try {
      await fc.assert(
        fc.asyncProperty(messages, async (message) => {
          const channel = new MessageChannel();
          const alive = new MessageChannel();
          const consumer = new StorageQueue(consumerRt, channel.port2);
          // A reference in flight on the probe slot, so that a well-formed descriptor naming it is received.
          if (counters.count(probe) === 0) counters.increment(probe);
          const m = message !== null && typeof message === 'object' && (message as { alive?: unknown }).alive === 'alive' ? { ...message, alive: alive.port1 } : message;
          let posted = true;
          try {
            channel.port1.postMessage(m, m !== message ? [alive.port1] : undefined);
          } catch {
            posted = false; // not cloneable (a function, a symbol): nothing arrives
          }
          if (posted) {
            const got = await within(expectTypedOrSuccess('StorageQueue#get', () => consumer.get()), 50);
            if (got instanceof ReceivedStorage) received++;
            releaseMade(got);
          }
          consumer.close();
          channel.port1.close();
          alive.port2.close();
          ipcOf(rt).dropReference(probe); // the reference no one received
          await new Promise((resolve) => setImmediate(resolve));
          expect(failures, 'errors thrown by listeners').to.deep.equal([]);
          expect(ipcOf(consumerRt).client.mappedFiles, 'counter files the consumer still maps').to.be.at.most(1);
          expectEmpty(consumerRt);
        }),
        RUNS,
      );
    } finally {
      process.off('uncaughtException', onError);
    }
    expect(received, 'storages received from well-formed descriptors').to.be.at.least(1);
  });

  it('StorageQueue#close, flush and [Symbol.dispose] ignore junk and are idempotent', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('close', 'flush', 'dispose'), junkArgs(2), async (method, a) => {
        const channel = new MessageChannel();
        const queue = new StorageQueue(rt, channel.port1);
        const pending = queue.get().catch((error: unknown) => error);
        const fn = (method === 'dispose' ? queue[Symbol.dispose] : queue[method as 'close' | 'flush']) as (...x: unknown[]) => unknown;
        await expectTypedOrSuccess(`StorageQueue#${method}`, () => fn.apply(queue, a));
        queue.close();
        queue.close();
        expect(queue.closed).to.equal(true);
        expect(await pending).to.have.property('code', 'DISPOSED');
        channel.port2.close();
        expectEmpty(rt);
      }),
      RUNS,
    );
  });

  it('SharedMemoryFile.create, open and unlink give a typed error or succeed, and leave no object behind', async () => {
    const name = `/stowage-ipc-${process.pid}-junk`;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('create', 'open', 'unlink', 'members'), fc.tuple(mostly([name, 'existing', 4096, 0, 1 << 30, 'no-slash']), optionsArg([{ name }, { name: 'no-slash' }, { name: 5 }])), async (method, a) => {
        using existing = SharedMemoryFile.create(64);
        const args = a.map((x) => (x === 'existing' ? existing.name : x));
        let made: unknown;
        if (method === 'members') {
          for (const member of ['unlink', 'close'] as const) await expectTypedOrSuccess(`SharedMemoryFile#${member}`, () => (existing[member] as (...x: unknown[]) => unknown).apply(existing, args));
          await expectTypedOrSuccess('SharedMemoryFile#buffer', () => existing.buffer);
        } else {
          const fn = SharedMemoryFile[method] as (...x: unknown[]) => unknown;
          made = await expectTypedOrSuccess(`SharedMemoryFile.${method}`, () => fn.apply(SharedMemoryFile, args));
        }
        releaseMade(made);
        if (!existing.closed) existing.unlink();
        SharedMemoryFile.unlink(name);
        expect(shmObjects(), 'shared-memory objects of this process').to.deep.equal([]);
      }),
      RUNS,
    );
  });

  it('RefCounterFiles gives a typed error or succeeds, and keeps 0 <= held <= count', async () => {
    const members = ['constructor', 'allocate', 'increment', 'count', 'held', 'done', 'reclaimDead', 'close'] as const;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...members), fc.oneof(junkArgs(2, ['slot', 'forged', new Set([7]), { file: '/stowage-ipc-none', slot: 0, nonce: 5n }]), fc.tuple(optionsArg([{ slotsPerFile: 2 }, { slotsPerFile: 0 }, { slotsPerFile: 2 ** 30 }]))), async (member, generated) => {
        const files = new RefCounterFiles({ slotsPerFile: 2 });
        try {
          const slot = files.allocate();
          files.increment(slot);
          const a = generated.map((x) => (x === 'slot' ? slot : x === 'forged' ? { ...slot, nonce: slot.nonce ^ 1n } : x));
          if (member === 'constructor') {
            releaseMade(await expectTypedOrSuccess('new RefCounterFiles', () => new RefCounterFiles(a[0] as object)));
          } else {
            await expectTypedOrSuccess(`RefCounterFiles#${member}`, () => (files[member] as (...x: unknown[]) => unknown).apply(files, a));
            if (member !== 'close') {
              expect(files.held(slot)).to.be.at.least(0);
              expect(files.held(slot)).to.be.at.most(files.count(slot));
            }
          }
        } finally {
          files.close();
        }
        expect(shmObjects(), 'shared-memory objects of this process').to.deep.equal([]);
      }),
      RUNS,
    );
  });

  it('RefCounterClient gives a typed error or succeeds, and gives back what it acquired at close', async () => {
    const members = ['constructor', 'acquire', 'release', 'producerGone', 'count', 'close'] as const;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...members), fc.oneof(junkArgs(2, ['slot', 'slot', 'forged', { file: '/stowage-ipc-none', slot: 0, nonce: 5n }]), fc.tuple(optionsArg([{ threadId: 7 }, { idleFiles: 0 }, { threadId: -1 }, { idleFiles: 'all' }]))), async (member, generated) => {
        const files = new RefCounterFiles({ slotsPerFile: 4 });
        const client = new RefCounterClient({ threadId: 7 });
        try {
          const slot = files.allocate();
          files.increment(slot);
          const a = generated.map((x) => (x === 'slot' ? slot : x === 'forged' ? { ...slot, nonce: slot.nonce ^ 1n } : x));
          if (member === 'constructor') {
            releaseMade(await expectTypedOrSuccess('new RefCounterClient', () => new RefCounterClient(a[0] as object)));
          } else {
            await expectTypedOrSuccess(`RefCounterClient#${member}`, () => (client[member] as (...x: unknown[]) => unknown).apply(client, a));
          }
          expect(files.held(slot)).to.be.at.most(files.count(slot));
          client.close();
          expect(files.held(slot), 'references held once the client closed').to.equal(0);
          expect(client.mappedFiles, 'files mapped once the client closed').to.equal(0);
        } finally {
          client.close();
          files.close();
        }
      }),
      RUNS,
    );
  });

  it('checkStorageDescriptor gives an InvalidArgumentError or accepts, and what it accepts has the fields a receive reads', async () => {
    const files = new RefCounterFiles();
    const slot = files.allocate();
    try {
      await fc.assert(
        fc.asyncProperty(descriptors(slot, new SharedArrayBuffer(64)), async (d) => {
          const accepted = (await expectTypedOrSuccess('checkStorageDescriptor', () => {
            checkStorageDescriptor(d);
            return true;
          })) === true;
          if (!accepted) return;
          const x = d as { device: string; byteLength: number; memory: { kind: string; byteOffset: number } };
          expect(Number.isSafeInteger(x.byteLength) && x.byteLength >= 0).to.equal(true);
          expect(Number.isSafeInteger(x.memory.byteOffset) && x.memory.byteOffset >= 0).to.equal(true);
        }),
        { numRuns: 300 },
      );
    } finally {
      files.close();
    }
  });
});
