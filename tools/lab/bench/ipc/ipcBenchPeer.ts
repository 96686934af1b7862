// The consumer of ipc.bench.ts, in a worker thread (workerData.port: the queue's port; control on parentPort) or in
// a child process (queue and control on the process channel). Control messages: { bench: 'expect', n } — answer
// { bench: 'ack', activeMs } once n more storages were got and released (activeMs: how long this thread's event
// loop was busy since the expect, performance.eventLoopUtilization); { bench: 'bytes', data } — a copied payload (the
// baseline), counted like a storage; { bench: 'exit' }.
import 'reflect-metadata';

import type { MessagePort } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';

import { createRuntime } from '@stowage/core';
import { ipc, StorageQueue } from '@stowage/ipc';

interface Control {
  readonly bench?: 'expect' | 'bytes' | 'exit';
  readonly n?: number;
  readonly data?: Uint8Array;
}

const rt = await createRuntime({ plugins: [ipc()] });
const queue = new StorageQueue(rt, isMainThread ? process : (workerData as { port: MessagePort }).port);
const send = (m: unknown): void => void (isMainThread ? process.send!(m) : parentPort!.postMessage(m));
let expected = 0;
let got = 0;
let since = performance.eventLoopUtilization();

function counted(): void {
  got++;
  check();
}

function check(): void {
  if (expected > 0 && got >= expected) {
    got -= expected;
    expected = 0;
    send({ bench: 'ack', activeMs: performance.eventLoopUtilization(since).active });
  }
}

const onControl = (m: Control): void => {
  if (m.bench === 'expect') {
    expected = m.n ?? 1;
    since = performance.eventLoopUtilization();
    check();
  } else if (m.bench === 'bytes') {
    counted();
  } else if (m.bench === 'exit') {
    queue.close();
    void rt.dispose().then(() => (isMainThread ? process.disconnect() : parentPort!.close()));
  }
};
if (isMainThread) process.on('message', onControl);
else parentPort!.on('message', onControl);
send({ bench: 'ready' });

for await (const r of queue) {
  r.release();
  counted();
}
