import { expect } from 'chai';
import { MessageChannel, Worker } from 'node:worker_threads';

import type { Runtime, StorageImpl } from '@stowage/core';
import { cpu, createRuntime, DisposedError, InvalidArgumentError, wrapAllocators } from '@stowage/core';
import { adaptorCases } from '@stowage/core/testing';
import type { SabMemory, StorageDescriptor } from '@stowage/ipc';
import { ipc, ipcCollect, ipcOf, StorageQueue } from '@stowage/ipc';

import { shmObjects } from './childProcess.js';
import type { Reply } from './commandReplies.js';
import { CommandReplies } from './commandReplies.js';
import type { WorkerCommand } from './storageQueueWorker.js';

interface Described {
  readonly byteLength: number;
  readonly bytes: number[];
  readonly tensor: { dtype: string; sizes: number[]; strides: number[]; storageOffset: number } | null;
}

/** A worker running storageQueueWorker.js, consuming from the other end of `queue`'s channel. */
class Consumer {
  readonly worker: Worker;
  readonly #replies = new CommandReplies();

  private constructor(worker: Worker) {
    this.worker = worker;
    worker.on('message', (r: Reply) => this.#replies.settle(r));
  }

  static async start(port: import('node:worker_threads').MessagePort): Promise<Consumer> {
    const worker = new Worker(new URL('./storageQueueWorker.js', import.meta.url), { workerData: { port }, transferList: [port as never] });
    const consumer = new Consumer(worker);
    await new Promise<void>((resolve, reject) => {
      void consumer.#replies.ready().then(resolve);
      worker.once('error', reject);
    });
    return consumer;
  }

  /** Runs a command; resolves to its value or rejects with { name, code, message }. */
  call<T = unknown>(op: string, args: Omit<WorkerCommand, 'id' | 'op'> = {}): Promise<T> {
    return this.#replies.call((id) => this.worker.postMessage({ id, op, ...args }));
  }

  /** The error a command fails with. */
  async failure(op: string, args: Omit<WorkerCommand, 'id' | 'op'> = {}): Promise<{ name: string; code?: string; message: string }> {
    try {
      await this.call(op, args);
    } catch (error) {
      return error as { name: string; code?: string; message: string };
    }
    throw new Error(`${op} succeeded`);
  }

  async stop(): Promise<void> {
    await this.worker.terminate();
  }
}

const view = (s: StorageImpl): Uint8Array => {
  const p = s.peekDataPtr();
  return new Uint8Array(p.handle as SharedArrayBuffer, p.byteOffset, p.byteLength);
};

describe('StorageQueue (worker threads)', () => {
  let rt: Runtime;
  let queue: StorageQueue;
  let consumer: Consumer;
  let port: import('node:worker_threads').MessagePort;
  beforeEach(async () => {
    // No periodic collection (Note [Dead consumers]): these tests count the bytes ipcCollect frees.
    rt = await createRuntime({ plugins: [cpu({ shared: true }), ipc({ deadCheckIntervalMs: 0 })] });
    const channel = new MessageChannel();
    port = channel.port1;
    queue = new StorageQueue(rt, channel.port1);
    consumer = await Consumer.start(channel.port2);
  });
  afterEach(async () => {
    queue.close();
    await consumer.stop();
    await rt.dispose();
  });
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  describe('StorageQueue#put', () => {
    it('round-trips a storage: the consumer reads the bytes that were put', async () => {
      const s = rt.storage(64);
      view(s).forEach((_, i, a) => (a[i] = i));
      queue.put(s);
      const got = await consumer.call<Described>('get', { key: 'a' });
      expect(got.byteLength).to.equal(64);
      expect(got.bytes).to.deep.equal([...view(s)]);
      expect(got.tensor).to.equal(null);
      await consumer.call('release', { key: 'a' });
      s.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    });

    it('posts the puts of one task as one message per 256, and they are got in the order they were put', async () => {
      let messages = 0;
      const postMessage = port.postMessage.bind(port);
      port.postMessage = (...args: Parameters<typeof postMessage>) => {
        messages++;
        postMessage(...args);
      };
      const storages = Array.from({ length: 600 }, (_, i) => {
        const s = rt.storage(8 + (i % 3) * 8);
        view(s)[0] = i % 251;
        return s;
      });
      for (const s of storages) queue.put(s);
      expect(messages, 'the first 512 went as two messages; the other 88 wait for the end of the task').to.equal(2);
      const first = await consumer.call<number[]>('drain', { count: 600 });
      expect(messages).to.equal(3);
      expect(first).to.deep.equal(storages.map((_, i) => i % 251));
      for (const s of storages) s.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    });

    it('refuses a put once the other end closed the queue with DisposedError, and frees the storage as usual', async () => {
      await consumer.call('close');
      expect(await queue.get().catch((e: unknown) => e), 'the close arrived').to.be.instanceOf(DisposedError);
      const s = rt.storage(16);
      expect(() => queue.put(s)).to.throw(DisposedError, /other end closed/);
      s.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    });

    it('round-trips a tensor with its dtype, sizes, strides and storage offset', async () => {
      const t = rt.tensor([2, 3], { dtype: 'int16' }).asStrided([3, 2], [1, 3], 0);
      queue.put(t);
      const got = await consumer.call<Described>('get', { key: 't' });
      expect(got.tensor).to.deep.equal({ dtype: 'int16', sizes: [3, 2], strides: [1, 3], storageOffset: 0 });
      await consumer.call('release', { key: 't' });
      t.storage.release();
    });

    it('is zero copy both ways: a write after put is seen by the consumer, and a write by the consumer by the producer', async () => {
      const s = rt.storage(16);
      view(s).fill(1);
      queue.put(s);
      await consumer.call('get', { key: 'z' });
      view(s).fill(2);
      expect((await consumer.call<Described>('read', { key: 'z' })).bytes).to.deep.equal(new Array(16).fill(2));
      await consumer.call('write', { key: 'z', value: 3 });
      expect([...view(s)]).to.deep.equal(new Array(16).fill(3));
      await consumer.call('release', { key: 'z' });
      s.release();
    });

    it("keeps the producer's memory while the consumer holds it, in the limbo after the producer's release, and frees it after the consumer's", async () => {
      const service = ipcOf(rt);
      const s = rt.storage(4096);
      view(s).fill(9);
      queue.put(s);
      await consumer.call('get', { key: 'h' });
      s.release();
      expect(service.limboBytes()).to.equal(4096);
      const others = [rt.storage(4096), rt.storage(4096)];
      for (const o of others) view(o).fill(0xee);
      expect((await consumer.call<Described>('read', { key: 'h' })).bytes).to.deep.equal(new Array(4096).fill(9));
      await consumer.call('release', { key: 'h' });
      expect(ipcCollect(rt)).to.equal(4096);
      expect(service.limboBytes()).to.equal(0);
      for (const o of others) o.release();
    });

    it('refuses a storage of a non-shared allocator, saying how to make it shareable, and sends nothing', async () => {
      const s = rt.storage(16, { shared: false });
      expect(() => queue.put(s)).to.throw(InvalidArgumentError, /cpu\(\{ shared: true \}\)/);
      s.release();
      const t = rt.storage(16);
      queue.put(t); // the queue still works: this is the first message
      expect((await consumer.call<Described>('get', { key: 'n' })).byteLength).to.equal(16);
      await consumer.call('release', { key: 'n' });
      t.release();
    });
  });

  describe('StorageQueue transports', () => {
    it('runs over a Worker itself (its own port), and close() leaves the worker running', async () => {
      const reply = new MessageChannel();
      const worker = new Worker(new URL('./workerTransportChild.js', import.meta.url), { workerData: { reply: reply.port2 }, transferList: [reply.port2] });
      const overWorker = new StorageQueue(rt, worker);
      try {
        const s = rt.storage(16);
        rt.write(s, new Uint8Array([42]));
        overWorker.put(s);
        s.release();
        const first = await new Promise((resolve) => reply.port1.once('message', resolve));
        expect(first).to.equal(42);
        overWorker.close();
        expect(worker.threadId, 'the queue does not terminate a worker it was given').to.not.equal(-1);
      } finally {
        reply.port1.close();
        await worker.terminate();
      }
      expect(ipcCollect(rt)).to.be.a('number');
      expect(ipcOf(rt).limboBytes()).to.equal(0, 'the worker released what it got');
    });

    it('refuses options that are not an options object, or have a key other than batch, with InvalidArgumentError', () => {
      const other = new MessageChannel();
      try {
        for (const options of [null, 5, { bach: true }, { batch: 'yes' }]) expect(() => new StorageQueue(rt, other.port1, options as never), String(options)).to.throw(InvalidArgumentError, /options/);
      } finally {
        other.port1.close();
      }
    });

    it('refuses a child process forked without serialization: advanced when the queue is made, not at the first put', async () => {
      const { fork } = await import('node:child_process');
      const child = fork(new URL('./storageQueueChild.js', import.meta.url), [], { stdio: 'ignore' });
      try {
        expect(() => new StorageQueue(rt, child)).to.throw(InvalidArgumentError, /serialization: 'advanced'/);
      } finally {
        child.kill();
      }
    });
  });

  describe('StorageQueue#get', () => {
    it('refuses to re-send a received storage, with the hint to copy it first', async () => {
      const s = rt.storage(16);
      queue.put(s);
      await consumer.call('get', { key: 'r' });
      const e = await consumer.failure('resend', { key: 'r' });
      expect(e.code).to.equal('INVALID_ARGUMENT');
      expect(e.message).to.match(/received storage cannot be sent on.*copy it/);
      await consumer.call('release', { key: 'r' });
      s.release();
    });

    it('refuses reading a received storage after its release with UseAfterReleaseError', async () => {
      const s = rt.storage(16);
      queue.put(s);
      await consumer.call('get', { key: 'u' });
      await consumer.call('release', { key: 'u' });
      expect((await consumer.failure('readAfterRelease', { key: 'u' })).code).to.equal('USE_AFTER_RELEASE');
      expect((await consumer.failure('readStorageAfterRelease', { key: 'u' })).code).to.equal('USE_AFTER_RELEASE');
      s.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    });

    it('refuses a descriptor received twice, malformed or forged descriptors and foreign messages with typed errors, and keeps working', async () => {
      const s = rt.storage(16);
      const d: StorageDescriptor = queue.put(s);
      await Promise.resolve(); // the put is posted at the end of this task's microtasks (Note [Batched puts])
      const post = (descriptor: unknown): void => port.postMessage({ stowage: 'ipc.storage', descriptor });
      post(d); // received twice
      post({ ...d, slot: { ...d.slot, nonce: d.slot.nonce ^ 1n } }); // forged nonce
      post({ ...d, slot: { ...d.slot, slot: 4095 } }); // a slot not handed out
      post({ ...d, slot: { ...d.slot, slot: 1 << 20 } }); // beyond the file
      post({ ...d, slot: { ...d.slot, file: '/stowage-ipc-no-such-file' } }); // another (missing) file
      post({ ...d, byteLength: (d.memory as SabMemory).buffer.byteLength + 1 }); // past its buffer
      post({ ...d, memory: { kind: 'sab', buffer: new ArrayBuffer(16), byteOffset: 0 } }); // wrong shape
      port.postMessage('hello'); // not a queue message
      await consumer.call('get', { key: 'once' });
      const codes: (string | undefined)[] = [];
      for (let i = 0; i < 7; i++) codes.push((await consumer.failure('get', { key: `bad${i}` })).code);
      expect(codes).to.deep.equal(['INVALID_ARGUMENT', 'FOREIGN_POINTER', 'INVALID_ARGUMENT', 'INVALID_ARGUMENT', 'DEVICE_ERROR', 'INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
      expect((await consumer.failure('get', { key: 'bad7' })).code).to.equal('INVALID_ARGUMENT');
      const t = rt.storage(32);
      queue.put(t);
      expect((await consumer.call<Described>('get', { key: 'after' })).byteLength).to.equal(32);
      await consumer.call('release', { key: 'once' });
      await consumer.call('release', { key: 'after' });
      s.release();
      t.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0, 'every reference was given back');
    });

    it('refuses get() in the thread that put, and gives the reference back', async () => {
      const channel = new MessageChannel();
      const a = new StorageQueue(rt, channel.port1);
      const b = new StorageQueue(rt, channel.port2);
      try {
        const s = rt.storage(16);
        a.put(s);
        let error: unknown;
        await b.get().catch((e: unknown) => (error = e));
        expect(error).to.be.instanceOf(InvalidArgumentError);
        expect((error as Error).message).to.match(/another thread than put/);
        s.release();
        expect(ipcOf(rt).limboBytes()).to.equal(0, 'freed at once: nobody holds it');
      } finally {
        a.close();
        b.close();
      }
    });

    it('releases a received storage that was garbage-collected without release, with a warning', async () => {
      const service = ipcOf(rt);
      const s = rt.storage(16);
      const d = queue.put(s);
      const warnings = await consumer.call<string[]>('forget');
      expect(warnings).to.have.length(1);
      expect(warnings[0]).to.match(/garbage-collected without release/);
      expect(service.counters.count(d.slot)).to.equal(0);
      s.release();
      expect(service.limboBytes()).to.equal(0);
    });
  });

  describe('Ipc (dead consumers)', () => {
    it('reclaims the references of a worker that ended holding storages, within 5 s and without a call', async () => {
      const a = rt.storage(4096);
      const b = rt.tensor([16, 16]);
      queue.put(a);
      queue.put(b);
      await consumer.call('get', { key: 'a' });
      await consumer.call('get', { key: 'b' });
      a.release();
      b.storage.release();
      expect(ipcOf(rt).limboSize).to.equal(2, 'the worker holds both');
      await consumer.worker.terminate(); // ends holding them
      const start = Date.now();
      while (ipcOf(rt).limboSize > 0 && Date.now() - start < 5000) await new Promise((r) => setTimeout(r, 50));
      expect(ipcOf(rt).limboSize, 'the limbo after the worker ended').to.equal(0);
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    });
  });

  describe('StorageQueue#close', () => {
    it('ends the other end’s async iteration after what was put, and get() after close is a DisposedError', async () => {
      const storages = [1, 2, 3].map((v) => {
        const s = rt.storage(8);
        view(s).fill(v);
        queue.put(s);
        return s;
      });
      queue.close();
      expect(await consumer.call('iterate')).to.deep.equal({ n: 3, sum: 8 * 6 });
      for (const s of storages) s.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0);
      let error: unknown;
      await queue.get().catch((e: unknown) => (error = e));
      expect(error).to.be.instanceOf(DisposedError);
      expect(() => queue.put(rt.storage(8))).to.throw(DisposedError);
    });

    it('gives back the references of storages that arrived and were never got', async () => {
      const s = rt.storage(16);
      queue.put(s);
      await new Promise((r) => setTimeout(r, 50)); // arrives in the worker's inbox
      await consumer.call('close');
      s.release();
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    });
  });
});

describe('StorageQueue through adaptors (Note [Device services] in core)', () => {
  for (const adaptor of adaptorCases()) {
    it(`sends a shared storage the runtime allocated through a ${adaptor.name}, and frees it once both ends released it`, async () => {
      await using rt = await createRuntime({ plugins: [cpu({ shared: true }), wrapAllocators('cpu', (a) => adaptor.wrap(a)), ipc({ deadCheckIntervalMs: 0 })] });
      const channel = new MessageChannel();
      const queue = new StorageQueue(rt, channel.port1);
      const consumer = await Consumer.start(channel.port2);
      try {
        const s = rt.storage(64);
        view(s).forEach((_, i, a) => (a[i] = 255 - i));
        queue.put(s);
        const got = await consumer.call<Described>('get', { key: 'a' });
        expect(got.bytes).to.deep.equal([...view(s)]);
        s.release();
        expect(ipcOf(rt).limboBytes(), 'in the limbo while the consumer holds it').to.be.greaterThan(0);
        await consumer.call('release', { key: 'a' });
        ipcCollect(rt);
        expect(ipcOf(rt).limboBytes()).to.equal(0);
        expect(rt.allocator('cpu').memoryStats()['allocation.all.current']).to.equal(0);
      } finally {
        queue.close();
        await consumer.stop();
      }
    });
  }
});
