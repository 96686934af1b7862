// pnpm bench:ipc — sharing storages through a StorageQueue with a worker thread and with a child process, against a
// baseline that copies the same bytes through the same kind of channel (a MessagePort for the worker, the process
// channel with advanced serialization for the child). One JSON line per (transport, method, size):
//   { transport, device, method: 'share' | 'copy', bytes, latencyUs, storagesPerSec, iterations }
// latencyUs: median round trip of one storage (put → the consumer gets and releases it → its ack back);
// storagesPerSec: N storages put back to back, timed until the consumer's single ack for all N.
// Sharing re-sends one sharedMemoryCpu() storage (one counter slot per send, released by the consumer); the copy
// baseline posts a fresh copy of its bytes each time. Then one line with the environment.
// STOWAGE_BENCH_MAX_BYTES caps the sizes (default 1 GiB).
import 'reflect-metadata';

import type { ChildProcess } from 'node:child_process';
import { fork } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker } from 'node:worker_threads';

import { createRuntime } from '@stowage/core';
import { ipc, sharedMemoryCpu, StorageQueue } from '@stowage/ipc';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;
const maxBytes = Number(process.env['STOWAGE_BENCH_MAX_BYTES'] ?? GiB);
const SIZES = [KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB, GiB].filter((b) => b <= maxBytes);
const peerScript = fileURLToPath(new URL('./ipcBenchPeer.js', import.meta.url));

interface Peer {
  readonly transport: 'worker' | 'process';
  readonly queue: StorageQueue;
  control(m: unknown): void;
  /** The next message from the peer. */
  next(): Promise<{ bench: string }>;
  stop(): Promise<void>;
}

async function startPeer(transport: 'worker' | 'process', rt: Awaited<ReturnType<typeof createRuntime>>): Promise<Peer> {
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
    const queue = new StorageQueue(rt, port1);
    peer = { transport, queue, control: (m) => worker.postMessage(m), next, stop: async () => void (await worker.terminate()) };
  } else {
    const child: ChildProcess = fork(peerScript, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.on('message', arrived);
    const queue = new StorageQueue(rt, child);
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

async function measure(peer: Peer, send: () => void, bytes: number): Promise<{ latencyUs: number; storagesPerSec: number; iterations: number }> {
  const rounds = Math.max(3, Math.min(200, Math.floor((512 * MiB) / bytes)));
  const roundTrips: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint();
    peer.control({ bench: 'expect', n: 1 });
    send();
    await peer.next();
    roundTrips.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  const n = Math.max(3, Math.min(5000, Math.floor((2 * GiB) / bytes)));
  const t0 = process.hrtime.bigint();
  peer.control({ bench: 'expect', n });
  for (let i = 0; i < n; i++) {
    send();
    if (i % 256 === 255) await new Promise((r) => setImmediate(r));
  }
  await peer.next();
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  return { latencyUs: Number(median(roundTrips).toFixed(1)), storagesPerSec: Math.round(n / seconds), iterations: n };
}

const rt = await createRuntime({ plugins: [sharedMemoryCpu(), ipc({ limboWarningBytes: Infinity })] });
for (const transport of ['worker', 'process'] as const) {
  const peer = await startPeer(transport, rt);
  for (const bytes of SIZES) {
    const storage = rt.storage(bytes);
    const p = storage.data();
    new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength).fill(1);
    const share = await measure(peer, () => void peer.queue.put(storage), bytes);
    console.log(JSON.stringify({ transport, device: 'cpu', method: 'share', bytes, ...share }));
    let copy: object;
    try {
      const source = new Uint8Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength);
      copy = await measure(peer, () => peer.control({ bench: 'bytes', data: source.slice() }), bytes);
    } catch (error) {
      copy = { error: (error as Error).message };
    }
    console.log(JSON.stringify({ transport, device: 'cpu', method: 'copy', bytes, ...copy }));
    storage.release();
  }
  peer.queue.close();
  await peer.stop();
}
await rt.dispose();
console.log(JSON.stringify({ environment: { node: process.version, cpu: os.cpus()[0]?.model, cores: os.cpus().length, platform: `${os.platform()} ${os.release()}` } }));
