// pnpm bench:ipc — sharing storages through a StorageQueue with a worker thread and with a child process, against a
// baseline that copies the same bytes through the same kind of channel (a MessagePort for the worker, the process
// channel with advanced serialization for the child). One JSON line per (transport, batch, method, size):
//   { transport, device, batch, method: 'share' | 'copy', bytes, latencyUs, storagesPerSec, iterations }
// batch: whether the producer's queue batches its puts (Note [Batched puts]: the default on a MessagePort; on a
// process channel only with { batch: true }, so the process runs twice, unbatched (the default) and batched).
// latencyUs: median round trip of one storage (put → the consumer gets and releases it → its ack back);
// storagesPerSec: N storages put back to back, timed until the consumer's single ack for all N;
// producerUs, consumerUs: CPU time a storage costs each end in that run (its event loop's busy time over N:
// performance.eventLoopUtilization), and capacityPerSec = 1e6 / max(producerUs, consumerUs), the rate the slower
// end could sustain with a core to itself (busy time is wall-clock time inside callbacks: a thread descheduled while
// busy still counts, so a loaded machine inflates these too, though less than the wall-clock rate).
// Sharing re-sends one sharedMemoryCpu() storage (one counter slot per send, released by the consumer); the copy
// baseline posts a fresh copy of its bytes each time. Then one line with the environment.
// STOWAGE_BENCH_MAX_BYTES and STOWAGE_BENCH_MIN_BYTES bound the sizes (default 1 KiB to 1 GiB).
import 'reflect-metadata';

import type { ChildProcess } from 'node:child_process';
import { fork } from 'node:child_process';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker } from 'node:worker_threads';

import { createRuntime } from '@stowage/core';
import { ipc, sharedMemoryCpu, StorageQueue } from '@stowage/ipc';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;
const maxBytes = Number(process.env['STOWAGE_BENCH_MAX_BYTES'] ?? GiB);
const minBytes = Number(process.env['STOWAGE_BENCH_MIN_BYTES'] ?? 0);
const SIZES = [KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB, GiB].filter((b) => b >= minBytes && b <= maxBytes);
const peerScript = fileURLToPath(new URL('./ipcBenchPeer.js', import.meta.url));

interface Peer {
  readonly transport: 'worker' | 'process';
  readonly queue: StorageQueue;
  control(m: unknown): void;
  /** The next message from the peer. */
  next(): Promise<{ bench: string; activeMs?: number }>;
  stop(): Promise<void>;
}

async function startPeer(transport: 'worker' | 'process', batch: boolean, rt: Awaited<ReturnType<typeof createRuntime>>): Promise<Peer> {
  const inbox: { bench: string }[] = [];
  const waiting: ((m: { bench: string }) => void)[] = [];
  const arrived = (m: { bench?: string }): void => {
    if (typeof m !== 'object' || m === null || typeof m.bench !== 'string') return;
    const w = waiting.shift();
    if (w !== undefined) w(m as { bench: string });
    else inbox.push(m as { bench: string });
  };
  const next = (): Promise<{ bench: string }> => (inbox.length > 0 ? Promise.resolve(inbox.shift()!) : new Promise((r) => waiting.push(r)));
  let peer: Peer;
  if (transport === 'worker') {
    const { port1, port2 } = new MessageChannel();
    const worker = new Worker(peerScript, { workerData: { port: port2 }, transferList: [port2] });
    worker.on('message', arrived);
    const queue = new StorageQueue(rt, port1, { batch });
    peer = { transport, queue, control: (m) => worker.postMessage(m), next, stop: async () => void (await worker.terminate()) };
  } else {
    const child: ChildProcess = fork(peerScript, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.on('message', arrived);
    const queue = new StorageQueue(rt, child, { batch });
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    peer = {
      transport,
      queue,
      control: (m) => child.send(m as never),
      next,
      stop: async () => {
        child.send({ bench: 'exit' });
        await exited;
      },
    };
  }
  const ready = await next();
  if (ready.bench !== 'ready') throw new Error(`the peer said ${ready.bench}`);
  return peer;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Times `send` (see the file comment). A copy moves `bytes` each time, so its rounds and storages shrink with the
 * size (at least 3); a share moves none: 200 rounds and 20,000 storages at every size, the first round (the
 * consumer's first mapping of the segment) excluded, and the storages timed after 5000 untimed ones (the JIT warm).
 */
interface Measured {
  latencyUs: number;
  storagesPerSec: number;
  iterations: number;
  producerUs: number;
  consumerUs: number;
  capacityPerSec: number;
}

async function measure(peer: Peer, send: () => void, bytes: number, copies: boolean): Promise<Measured> {
  const rounds = copies ? Math.max(3, Math.min(200, Math.floor((512 * MiB) / bytes))) : 201;
  const roundTrips: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint();
    peer.control({ bench: 'expect', n: 1 });
    send();
    peer.queue.flush();
    await peer.next();
    if (copies || i > 0) roundTrips.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  /** Streams n storages; returns the consumer's busy milliseconds. */
  const stream = async (n: number): Promise<number> => {
    peer.control({ bench: 'expect', n });
    for (let i = 0; i < n; i++) {
      send();
      if (i % 256 === 255) await new Promise((r) => setImmediate(r));
    }
    peer.queue.flush();
    return (await peer.next()).activeMs ?? NaN;
  };
  if (!copies) await stream(5000);
  const n = copies ? Math.max(3, Math.min(5000, Math.floor((2 * GiB) / bytes))) : 20_000;
  const elu = performance.eventLoopUtilization();
  const t0 = process.hrtime.bigint();
  const consumerMs = await stream(n);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const producerUs = (performance.eventLoopUtilization(elu).active * 1000) / n;
  const consumerUs = (consumerMs * 1000) / n;
  return {
    latencyUs: Number(median(roundTrips).toFixed(1)),
    storagesPerSec: Math.round(n / seconds),
    iterations: n,
    producerUs: Number(producerUs.toFixed(2)),
    consumerUs: Number(consumerUs.toFixed(2)),
    capacityPerSec: Math.round(1e6 / Math.max(producerUs, consumerUs)),
  };
}

const rt = await createRuntime({ plugins: [sharedMemoryCpu(), ipc({ limboWarningBytes: Infinity })] });
const runs = [
  { transport: 'worker', batch: true },
  { transport: 'process', batch: false },
  { transport: 'process', batch: true },
] as const;
for (const { transport, batch } of runs) {
  const peer = await startPeer(transport, batch, rt);
  const copies = !(transport === 'process' && batch); // the copy baseline does not depend on batching
  const share: ({ bytes: number } & Measured)[] = [];
  const copy: { bytes: number; latencyUs: number }[] = [];
  // Every share first: the copies' garbage (up to 1 GiB a message) must not land in the shares' timings.
  const storages = SIZES.map((bytes) => {
    const storage = rt.storage(bytes);
    const p = storage.data();
    new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength).fill(1);
    return storage;
  });
  await measure(peer, () => void peer.queue.put(storages[0]!), SIZES[0]!, false); // untimed: both ends' JIT warm
  for (const [i, bytes] of SIZES.entries()) {
    const shared = await measure(peer, () => void peer.queue.put(storages[i]!), bytes, false);
    share.push({ bytes, ...shared });
    console.log(JSON.stringify({ transport, device: 'cpu', batch, method: 'share', bytes, ...shared }));
  }
  for (const [i, bytes] of SIZES.entries()) {
    if (!copies) break;
    const p = storages[i]!.data();
    let copied: object;
    try {
      const source = new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength);
      copied = await measure(peer, () => peer.control({ bench: 'bytes', data: source.slice() }), bytes, true);
      copy.push({ bytes, ...(copied as { latencyUs: number }) });
    } catch (error) {
      copied = { error: (error as Error).message };
    }
    console.log(JSON.stringify({ transport, device: 'cpu', batch, method: 'copy', bytes, ...copied }));
  }
  for (const storage of storages) storage.release();
  peer.queue.close();
  await peer.stop();
  // Targets: share latency within 2× from the smallest to the largest size; storages a second (of the smallest).
  const spread = (xs: { latencyUs: number }[]): number => Number((xs.at(-1)!.latencyUs / xs[0]!.latencyUs).toFixed(2));
  console.log(
    JSON.stringify({
      summary: {
        transport,
        batch,
        sizes: `${SIZES[0]}..${SIZES.at(-1)}`,
        shareLatencyLargestOverSmallest: spread(share),
        shareLatencyMaxOverMin: Number((Math.max(...share.map((x) => x.latencyUs)) / Math.min(...share.map((x) => x.latencyUs))).toFixed(2)),
        copyLatencyLargestOverSmallest: copy.length === SIZES.length ? spread(copy) : null,
        storagesPerSecMin: Math.min(...share.map((x) => x.storagesPerSec)),
        storagesPerSecSmallest: share[0]!.storagesPerSec,
        capacityPerSecMin: Math.min(...share.map((x) => x.capacityPerSec)),
      },
    }),
  );
}
await rt.dispose();
console.log(JSON.stringify({ environment: { node: process.version, cpu: os.cpus()[0]?.model, cores: os.cpus().length, platform: `${os.platform()} ${os.release()}` } }));
