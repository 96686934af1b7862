import { expect } from 'chai';
import type { ChildProcess } from 'node:child_process';
import { fork } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readlinkSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { Runtime } from '@stowage/core';
import { cuda } from '@stowage/allocator-cuda';
import { testLibcuda } from '@stowage/allocator-cuda/testing';
import type { Device } from '@stowage/core';
import { cpu, createRuntime, DataPtr, DisposedError, ForwardingAllocator, InvalidArgumentError, StorageImpl, UseAfterReleaseError } from '@stowage/core';
import { ipc, ipcCollect, ipcOf, SharedMemoryError, sharedMemoryCpu, StorageQueue, UNSENT_WARNING_CODE } from '@stowage/ipc';

import { shmExists, shmObjects } from './childProcess.js';
import type { Reply } from './commandReplies.js';
import { CommandReplies } from './commandReplies.js';
import type { ChildCommand } from './storageQueueChild.js';

/** A forked consumer running storageQueueChild.js, commanded over the same channel its queue uses. */
class ChildConsumer {
  readonly child: ChildProcess;
  readonly #replies = new CommandReplies();

  private constructor(child: ChildProcess) {
    this.child = child;
    child.on('message', (m: { reply?: Reply }) => {
      if (m.reply !== undefined) this.#replies.settle(m.reply);
    });
  }

  static async start(script = './storageQueueChild.js', env: NodeJS.ProcessEnv = process.env): Promise<ChildConsumer> {
    const child = fork(fileURLToPath(new URL(script, import.meta.url)), [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env });
    const consumer = new ChildConsumer(child);
    await new Promise<void>((resolve, reject) => {
      void consumer.#replies.ready().then(resolve);
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`the child exited with ${code}`)));
    });
    return consumer;
  }

  call<T = unknown>(op: string, args: Omit<ChildCommand, 'id' | 'op'> = {}): Promise<T> {
    return this.#replies.call((id) => this.child.send({ cmd: { id, op, ...args } }));
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    await this.call('exit').catch(() => undefined);
    await exited;
  }
}

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

const view = (s: StorageImpl): Uint8Array => {
  const p = s.data();
  return new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength);
};

describe('StorageQueue (child process, POSIX shared memory)', () => {
  let rt: Runtime;
  let queue: StorageQueue;
  let consumer: ChildConsumer;
  beforeEach(async () => {
    // No periodic collection (Note [Dead consumers]): these tests count the bytes ipcCollect frees.
    rt = await createRuntime({ plugins: [sharedMemoryCpu(), ipc({ deadCheckIntervalMs: 0 })] });
    consumer = await ChildConsumer.start();
    queue = new StorageQueue(rt, consumer.child);
  });
  afterEach(async () => {
    queue.close();
    await consumer.stop();
    await rt.dispose();
  });
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  it('round-trips a storage zero copy both ways, and the producer frees it after the consumer releases it', async () => {
    const s = rt.storage(4096);
    view(s).forEach((_, i, a) => (a[i] = i % 251));
    const d = queue.put(s);
    expect(d.memory.kind).to.equal('shm');
    const got = await consumer.call<{ byteLength: number; bytes: number[]; memory: string }>('get', { key: 'a' });
    expect(got.memory).to.equal('shm');
    expect(got.bytes).to.deep.equal([...view(s)]);
    view(s).fill(5); // a write after sending is seen by the consumer
    expect(await consumer.call<number[]>('read', { key: 'a' })).to.deep.equal(new Array(4096).fill(5));
    await consumer.call('write', { key: 'a', value: 6 }); // and the consumer's by the producer
    expect([...view(s)]).to.deep.equal(new Array(4096).fill(6));
    s.release();
    expect(ipcOf(rt).limboBytes()).to.equal(4096, 'held by the child');
    await consumer.call('release', { key: 'a' });
    expect((await consumer.call('readAfterRelease', { key: 'a' }).catch((e: { code: string }) => e.code))).to.equal('USE_AFTER_RELEASE');
    expect(ipcCollect(rt)).to.equal(4096);
  });

  it('posts each put at once on a process channel, so a message sent right after it arrives after it', async () => {
    let sends = 0;
    const send = consumer.child.send.bind(consumer.child);
    consumer.child.send = ((...args: Parameters<typeof send>) => (sends++, send(...args))) as typeof send;
    const storages = [1, 2, 3].map((i) => {
      const s = rt.storage(64);
      view(s)[0] = i;
      queue.put(s);
      return s;
    });
    expect(sends).to.equal(3);
    expect(await consumer.call<number[]>('drain', { value: 3 })).to.deep.equal([1, 2, 3]);
    for (const s of storages) s.release();
    expect(ipcCollect(rt)).to.equal(0);
    expect(ipcOf(rt).limboSize).to.equal(0);
  });

  it('batches puts on a process channel when asked ({ batch: true }); flush() posts them before a message that must follow', async () => {
    const other = await ChildConsumer.start();
    const batched = new StorageQueue(rt, other.child, { batch: true });
    try {
      let sends = 0;
      const send = other.child.send.bind(other.child);
      other.child.send = ((...args: Parameters<typeof send>) => (sends++, send(...args))) as typeof send;
      const storages = Array.from({ length: 300 }, (_, i) => {
        const s = rt.storage(32);
        view(s)[0] = i % 251;
        batched.put(s);
        return s;
      });
      expect(sends, '256 puts fill one message').to.equal(1);
      batched.flush();
      expect(sends).to.equal(2);
      expect(await other.call<number[]>('drain', { value: 300 })).to.deep.equal(storages.map((_, i) => i % 251));
      for (const s of storages) s.release();
      expect(ipcOf(rt).limboSize).to.equal(0);
    } finally {
      batched.close();
      await other.stop();
    }
  });

  it('unlinks the segments when the runtime is disposed', async () => {
    const s = rt.storage(64);
    const name = (queue.put(s).memory as { name: string }).name;
    expect(shmExists(name)).to.equal(true);
    await consumer.call('get', { key: 'b' });
    await consumer.call('release', { key: 'b' });
    s.release();
    queue.close();
    await rt.dispose();
    expect(shmExists(name)).to.equal(false);
  });

  it('refuses a storage that is not in POSIX shared memory, saying to use sharedMemoryCpu()', async () => {
    const plain = await createRuntime({ plugins: [cpu({ shared: true }), ipc()] });
    const q = new StorageQueue(plain, consumer.child);
    try {
      expect(() => q.put(plain.storage(16))).to.throw(InvalidArgumentError, /sharedMemoryCpu\(\)/);
    } finally {
      q.close();
      await plain.dispose();
    }
    const s = rt.storage(16);
    queue.put(s); // the queue still works
    expect((await consumer.call<{ byteLength: number }>('get', { key: 'c' })).byteLength).to.equal(16);
    await consumer.call('release', { key: 'c' });
    s.release();
  });
});

const poll = async (done: () => boolean, timeoutMs: number): Promise<number> => {
  const start = Date.now();
  while (!done() && Date.now() - start < timeoutMs) await new Promise((r) => setTimeout(r, 50));
  return Date.now() - start;
};

describe('Ipc (dead consumers and early producers, processes)', () => {
  it('reclaims the references of a consumer killed with SIGKILL within 5 s, without a call, and leaves no shared memory', async () => {
    const rt = await createRuntime({ plugins: [sharedMemoryCpu(), ipc()] });
    const consumer = await ChildConsumer.start();
    const queue = new StorageQueue(rt, consumer.child);
    try {
      const storages = [rt.storage(4096), rt.storage(1 << 20), rt.storage(100)];
      for (const [i, s] of storages.entries()) {
        queue.put(s);
        await consumer.call('get', { key: String(i) });
        s.release();
      }
      expect(ipcOf(rt).limboSize).to.equal(3, 'held by the child');
      const exited = new Promise((r) => consumer.child.once('exit', r));
      consumer.child.kill('SIGKILL');
      await exited;
      const ms = await poll(() => ipcOf(rt).limboSize === 0, 5000);
      expect(ipcOf(rt).limboSize, `the limbo ${ms} ms after the kill`).to.equal(0);
      expect(ipcOf(rt).limboBytes()).to.equal(0);
    } finally {
      queue.close();
      await rt.dispose();
    }
    expect(shmObjects(), 'shared-memory objects left after the producer disposed').to.deep.equal([]);
  });

  /**
   * Runs `body` against a producer child (storageQueueProducerChild.js) and a queue from it in a consumer runtime;
   * `exit()` ends the child, disposing its runtime first or not. Afterwards nothing of the producer is left in
   * /dev/shm: its counter files are unlinked by its dispose, or by the consumer that unmaps them last.
   */
  async function withProducer(dispose: boolean, body: (queue: StorageQueue, put: (bytes: number, value: number) => Promise<string>, exit: () => Promise<void>) => Promise<void>): Promise<void> {
    const rt = await createRuntime({ plugins: [ipc()] });
    const producer = await ChildConsumer.start('./storageQueueProducerChild.js');
    const queue = new StorageQueue(rt, producer.child);
    const pid = producer.child.pid!;
    try {
      await body(
        queue,
        (bytes, value) => producer.call<string>('put', { bytes, value } as never),
        async () => {
          const exited = new Promise((r) => producer.child.once('exit', r));
          producer.child.send({ cmd: { id: 99, op: 'exit', dispose } });
          await exited;
        },
      );
    } finally {
      queue.close();
      await rt.dispose();
    }
    expect(shmObjects(`stowage-ipc-${pid}-`), "the producer's objects left").to.deep.equal([]);
  }

  for (const dispose of [true, false]) {
    it(`leaves host memory readable by the consumer when its producer exits first (${dispose ? 'after disposing its runtime' : 'without disposing it'}); the last holder unlinks it`, () =>
      withProducer(dispose, async (queue, put, exit) => {
        const name = await put(8192, 7);
        const received = await queue.get();
        await exit();
        expect(shmExists(name), 'the segment outlives its producer').to.equal(true);
        expect([...received.bytes()]).to.deep.equal(new Array(8192).fill(7));
        received.bytes().fill(8); // still the memory, writable
        expect(received.bytes()[8191]).to.equal(8);
        received.release();
        expect(shmExists(name), 'unlinked by the last holder').to.equal(false);
      }));

    it(`${dispose ? 'refuses a storage still in flight when its producer disposed its runtime with SharedMemoryError ENOENT' : 'gets a storage put before its producer died'}, and leaves nothing in /dev/shm`, () =>
      withProducer(dispose, async (queue, put, exit) => {
        const name = await put(3 << 20, 9);
        await exit();
        if (dispose) {
          expect(shmExists(name), 'a dispose frees what no consumer received').to.equal(false);
          const error = await queue.get().catch((e: unknown) => e);
          expect(error).to.be.instanceOf(SharedMemoryError);
          expect((error as SharedMemoryError).errnoName).to.equal('ENOENT');
        } else {
          expect(shmExists(name), 'the segment of a storage in flight outlives its producer').to.equal(true);
          const late = await queue.get(); // its counter file is opened only now
          expect(late.bytes().every((b) => b === 9)).to.equal(true);
          late.release();
          expect(shmExists(name), 'unlinked by its last holder').to.equal(false);
        }
      }));
  }
});

describe('StorageQueue (child process, CUDA on the stand-in or a real libcuda)', function () {
  this.timeout(60_000);
  const lib = testLibcuda();
  if (typeof lib === 'string') {
    it('sends CUDA storages (skipped: no libcuda could be loaded or built)', function () {
      console.log(`    skipped: ${lib}`);
      this.skip();
    });
    return;
  }
  const MiB = 2 ** 20;

  for (const expandableSegments of [false, true]) {
    it(`round-trips a storage of ${expandableSegments ? 'an expandable' : 'a fixed'} segment zero copy (${expandableSegments ? "its pages' descriptors taken with pidfd_getfd" : 'a legacy handle'}), and frees it after the consumer's release`, async () => {
      // No periodic collection (Note [Dead consumers]): these tests count the bytes ipcCollect frees.
      const rt = await createRuntime({ plugins: [cuda({ libcuda: lib.path, allocConf: '', expandableSegments }), ipc({ deadCheckIntervalMs: 0 })] });
      const consumer = await ChildConsumer.start('./storageQueueChild.js', { ...process.env, STOWAGE_LIBCUDA: lib.path });
      const queue = new StorageQueue(rt, consumer.child);
      try {
        const allocator = rt.allocator('cuda:0');
        const spacer = rt.storage(MiB + 512, { device: 'cuda:0' }); // the block does not start its segment
        const s = rt.storage(3 * MiB, { device: 'cuda:0' });
        const pattern = new Uint8Array(3 * MiB).map((_, i) => (i * 7) % 251);
        allocator.writeBytes(s.data(), pattern);
        const d = queue.put(s);
        expect(d.device).to.equal('cuda:0');
        expect(d.memory.kind).to.equal('cuda');
        const exported = (d.memory as { exported: { kind: string; fds?: number[] } }).exported;
        expect(exported.kind).to.equal(expandableSegments ? 'shareable' : 'legacy');
        const target = (fd: number): string | undefined => (existsSync(`/proc/self/fd/${fd}`) ? readlinkSync(`/proc/self/fd/${fd}`) : undefined);
        const exportedFds = (exported.fds ?? []).map((fd) => [fd, target(fd)] as const);
        expect(exportedFds.every(([, t]) => t !== undefined), 'open until the consumer takes them').to.equal(true);
        const got = await consumer.call<{ device: string; byteLength: number }>('get', { key: 'g', value: 1 });
        expect(got).to.include({ device: 'cuda:0', byteLength: 3 * MiB });
        for (const [fd, t] of exportedFds) expect(target(fd), `the export's descriptor ${fd}, closed after the consumer's ack`).to.not.equal(t);
        expect(await consumer.call('digest', { key: 'g' }), 'contents equal').to.equal(sha256(pattern));
        const nines = new Uint8Array(3 * MiB).fill(9);
        allocator.writeBytes(s.data(), nines); // a write after sending is seen by the consumer
        expect(await consumer.call('digest', { key: 'g' })).to.equal(sha256(nines));
        await consumer.call('write', { key: 'g', value: 4 }); // and the consumer's by the producer
        expect((await allocator.readBytes(s.data())).every((b) => b === 4)).to.equal(true);
        s.release();
        expect(ipcOf(rt).limboBytes()).to.equal(3 * MiB, 'held by the child');
        expect(allocator.memoryStats().limbo_bytes).to.equal(3 * MiB);
        await consumer.call('release', { key: 'g' });
        expect(ipcCollect(rt)).to.equal(3 * MiB);
        spacer.release();
      } finally {
        queue.close();
        await consumer.stop();
        await rt.dispose();
      }
    });
  }

  it('refuses a CUDA storage whose producer died before it was got with UseAfterReleaseError, and releases one got before without error', async () => {
    const rt = await createRuntime({ plugins: [cuda({ libcuda: lib.path, allocConf: '' }), ipc({ deadCheckIntervalMs: 0 })] });
    const producer = await ChildConsumer.start('./storageQueueProducerChild.js', { ...process.env, STOWAGE_LIBCUDA: lib.path });
    const queue = new StorageQueue(rt, producer.child);
    try {
      await producer.call('put', { bytes: MiB, value: 3, device: 'cuda:0' } as never);
      await producer.call('put', { bytes: MiB, value: 4, device: 'cuda:0' } as never);
      const held = await queue.get();
      expect((await rt.allocator('cuda:0').readBytes(held.storage.data()))[0]).to.equal(3);
      const exited = new Promise((r) => producer.child.once('exit', r));
      producer.child.kill('SIGKILL');
      await exited;
      const late = await queue.get().catch((e: unknown) => e);
      expect(late).to.be.instanceOf(UseAfterReleaseError);
      expect((late as Error).message).to.match(/has exited, and its device memory went with its CUDA context/);
      expect(() => held.release(), 'a release after the producer died').to.not.throw();
      expect(await queue.get().catch((e: unknown) => e), 'the channel ended with the producer').to.be.instanceOf(DisposedError);
    } finally {
      queue.close();
      await rt.dispose();
    }
  });

  it('refuses a storage of a device that cannot cross processes (WebGPU) with a typed error that says so, and keeps working', async () => {
    const rt = await createRuntime({ plugins: [sharedMemoryCpu(), ipc()] });
    const consumer = await ChildConsumer.start();
    const queue = new StorageQueue(rt, consumer.child);
    try {
      const webgpu = { type: 'webgpu', index: 0 } as const;
      const gpu = new DataPtr({ device: webgpu, byteLength: 16, handle: {}, byteOffset: 0, address: 0, context: null, deleter: null });
      // A stand-in for a WebGPU allocator (only its device matters here): put refuses by device first.
      const allocator = new (class extends ForwardingAllocator {
        override get device(): Device {
          return webgpu;
        }
      })(rt.allocator('cpu'), { ownsUpstream: false });
      const storage = new StorageImpl({ dataPtr: gpu, allocator });
      expect(() => queue.put(storage)).to.throw(InvalidArgumentError, /webgpu memory cannot cross a device boundary/);
      const s = rt.storage(16);
      queue.put(s);
      expect((await consumer.call<{ byteLength: number }>('get', { key: 'w' })).byteLength).to.equal(16);
      await consumer.call('release', { key: 'w' });
      s.release();
    } finally {
      queue.close();
      await consumer.stop();
      await rt.dispose();
    }
  });
});

describe('StorageQueue (a net.Socket between processes)', function () {
  this.timeout(60_000);
  const lib = testLibcuda();
  let rt: Runtime;
  let consumer: ChildConsumer;
  let queue: StorageQueue;
  let dir: string;
  let socket: Socket;
  beforeEach(async () => {
    const withCuda = typeof lib === 'string' ? [] : [cuda({ libcuda: lib.path, allocConf: '' })];
    // No periodic collection (Note [Dead consumers]): these tests count the bytes ipcCollect frees.
    rt = await createRuntime({ plugins: [...withCuda, sharedMemoryCpu(), ipc({ deadCheckIntervalMs: 0 })] });
    dir = mkdtempSync(join(tmpdir(), 'stowage-queue-'));
    const path = join(dir, 'queue.sock');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const connected = new Promise<Socket>((resolve) => server.once('connection', resolve));
    const env = { ...process.env, STOWAGE_QUEUE_SOCKET: path, ...(typeof lib === 'string' ? {} : { STOWAGE_LIBCUDA: lib.path }) };
    consumer = await ChildConsumer.start('./storageQueueChild.js', env);
    socket = await connected;
    queue = new StorageQueue(rt, socket);
    server.close();
  });
  afterEach(async () => {
    queue.close();
    await consumer.stop();
    await rt.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('round-trips a host storage zero copy both ways in length-prefixed frames, and frees them after the release', async () => {
    const s = rt.storage(4096);
    view(s).forEach((_, i, a) => (a[i] = i % 253));
    const d = queue.put(s);
    expect(d.memory.kind).to.equal('shm');
    const got = await consumer.call<{ bytes: number[]; memory: string }>('get', { key: 's' });
    expect(got.memory).to.equal('shm');
    expect(got.bytes).to.deep.equal([...view(s)]);
    view(s).fill(3);
    expect(await consumer.call<number[]>('read', { key: 's' })).to.deep.equal(new Array(4096).fill(3));
    await consumer.call('write', { key: 's', value: 4 });
    expect([...view(s)]).to.deep.equal(new Array(4096).fill(4));
    s.release();
    expect(ipcOf(rt).limboBytes()).to.equal(4096);
    await consumer.call('release', { key: 's' });
    expect(ipcCollect(rt)).to.equal(4096);
  });

  it('gives back the references of puts whose stream closed before they were posted, with a warning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }): void => void (w.code === UNSENT_WARNING_CODE && warnings.push(w.message));
    process.on('warning', onWarning);
    try {
      const storages = [rt.storage(64), rt.storage(128)];
      for (const s of storages) queue.put(s);
      socket.destroy(); // before the end of this task, when the batch would go
      await new Promise((r) => setImmediate(r));
      expect(warnings).to.have.length(1);
      expect(warnings[0]).to.match(/2 storage\(s\) put on a StorageQueue were never sent/);
      for (const s of storages) s.release();
      expect(ipcOf(rt).limboSize, 'nothing waits for a consumer that never got them').to.equal(0);
      const late = rt.storage(8);
      expect(() => queue.put(late)).to.throw(DisposedError);
      late.release();
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('refuses a descriptor received twice and a frame that is not JSON with typed errors, and keeps working', async () => {
    const s = rt.storage(32);
    const d = queue.put(s);
    await consumer.call('get', { key: 'a' });
    const frame = (text: string): Buffer => {
      const header = Buffer.alloc(4);
      header.writeUInt32BE(Buffer.byteLength(text));
      return Buffer.concat([header, Buffer.from(text)]);
    };
    const again = JSON.stringify({ stowage: 'ipc.storage', descriptor: d }, (_k, v: unknown) => (typeof v === 'bigint' ? { $bigint: v.toString() } : v));
    const otherObject = JSON.stringify(
      { stowage: 'ipc.storage', descriptor: { ...d, memory: { ...d.memory, inode: (d.memory as { inode: number }).inode + 1 } } },
      (_k, v: unknown) => (typeof v === 'bigint' ? { $bigint: v.toString() } : v),
    );
    socket.write(Buffer.concat([frame(again), frame('{x}'), frame(otherObject)]));
    expect(await consumer.call('get', { key: 'b' }).catch((e: { code: string }) => e), 'the same descriptor again').to.include({ code: 'INVALID_ARGUMENT' });
    expect(await consumer.call('get', { key: 'c' }).catch((e: { code: string }) => e), 'not JSON').to.include({ code: 'INVALID_ARGUMENT' });
    const inode = await consumer.call('get', { key: 'e' }).catch((e: { code: string; message: string }) => e);
    expect(inode, 'the name of another object').to.include({ code: 'INVALID_ARGUMENT' });
    expect((inode as { message: string }).message).to.match(/was freed, and its name now belongs to another/);
    const t = rt.storage(8);
    queue.put(t);
    expect((await consumer.call<{ byteLength: number }>('get', { key: 'd' })).byteLength).to.equal(8);
    await consumer.call('release', { key: 'a' });
    await consumer.call('release', { key: 'd' });
    s.release();
    t.release();
    expect(ipcOf(rt).limboSize).to.equal(0);
  });

  it('carries a CUDA storage of an expandable segment (bigint nonce and descriptors in JSON, the ack back on the socket)', async function () {
    if (typeof lib === 'string') {
      console.log(`    skipped: ${lib}`);
      this.skip();
    }
    const allocator = rt.allocator('cuda:0');
    const s = rt.storage(2 ** 21, { device: 'cuda:0' });
    const bytes = new Uint8Array(2 ** 21).map((_, i) => i % 239);
    allocator.writeBytes(s.data(), bytes);
    const d = queue.put(s);
    expect((d.memory as { exported: { kind: string } }).exported.kind).to.equal('shareable');
    expect(await consumer.call<{ byteLength: number }>('get', { key: 'g', value: 1 })).to.include({ byteLength: 2 ** 21 });
    expect(await consumer.call('digest', { key: 'g' })).to.equal(sha256(bytes));
    const zeros = new Uint8Array(2 ** 21);
    allocator.writeBytes(s.data(), zeros);
    expect(await consumer.call('digest', { key: 'g' }), 'zero copy').to.equal(sha256(zeros));
    s.release();
    await consumer.call('release', { key: 'g' });
    expect(ipcCollect(rt)).to.equal(2 ** 21);
  });
});
