// A worker thread for the StorageQueue tests: a consumer (and producer) runtime with ipc(), a StorageQueue over the
// port in workerData, and commands from the test on parentPort, each answered with { id, value } or { id, error }.
import 'reflect-metadata';

import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import type { MessagePort } from 'node:worker_threads';
import { parentPort, workerData } from 'node:worker_threads';

import { cpu, createRuntime, isStowageError } from '@stowage/core';
import type { ReceivedStorage } from '@stowage/ipc';
import { FORGOTTEN_RELEASE_WARNING_CODE, ipc, StorageQueue } from '@stowage/ipc';

import { drainQueue } from './drainQueue.js';

export interface WorkerCommand {
  readonly id: number;
  readonly op: string;
  readonly key?: string;
  readonly value?: number;
  readonly count?: number;
}

const rt = await createRuntime({ plugins: [cpu({ shared: true }), ipc()] });
const queue = new StorageQueue(rt, (workerData as { port: MessagePort }).port);
const held = new Map<string, ReceivedStorage>();
const warnings: string[] = [];
process.on('warning', (w) => void ((w as Error & { code?: string }).code === FORGOTTEN_RELEASE_WARNING_CODE && warnings.push(w.message)));

const describe = (r: ReceivedStorage): unknown => ({
  byteLength: r.byteLength,
  bytes: [...r.bytes()],
  tensor: r.tensor === null ? null : { dtype: r.tensor.dtype, sizes: r.tensor.sizes, strides: r.tensor.strides, storageOffset: r.tensor.storageOffset },
});

async function run(c: WorkerCommand): Promise<unknown> {
  const key = c.key ?? '';
  const received = (): ReceivedStorage => {
    const r = held.get(key);
    if (r === undefined) throw new Error(`nothing held as ${key}`);
    return r;
  };
  switch (c.op) {
    case 'get': {
      const r = await queue.get();
      held.set(key, r);
      return describe(r);
    }
    case 'drain': // gets storages and releases each: their first bytes, in order
      return drainQueue(queue, c.count ?? 0);
    case 'read':
      return describe(received());
    case 'write':
      received().bytes().fill(c.value ?? 0);
      return null;
    case 'release':
      received().release();
      return null;
    case 'readAfterRelease':
      return received().bytes();
    case 'readStorageAfterRelease':
      return received().storage;
    case 'resend':
      return queue.put(received().storage);
    case 'iterate': {
      let n = 0;
      let sum = 0;
      for await (const r of queue) {
        using _ = r;
        n++;
        sum += r.bytes().reduce((a, b) => a + b, 0);
      }
      return { n, sum };
    }
    case 'forget': {
      // Gets a storage and drops it without release; the safety net must give its reference back.
      await (async () => void (await queue.get()))();
      setFlagsFromString('--expose-gc');
      const gc = runInNewContext('gc') as () => void;
      for (let i = 0; i < 20 && warnings.length === 0; i++) {
        gc();
        await new Promise((r) => setTimeout(r, 10));
      }
      return warnings;
    }
    case 'close':
      queue.close();
      return null;
    default:
      throw new Error(`unknown op ${c.op}`);
  }
}

parentPort!.on('message', (c: WorkerCommand) => {
  run(c).then(
    (value) => parentPort!.postMessage({ id: c.id, value }),
    (error: unknown) =>
      parentPort!.postMessage({
        id: c.id,
        error: { name: (error as Error).name, code: isStowageError(error) ? error.code : undefined, message: (error as Error).message },
      }),
  );
});
parentPort!.postMessage({ id: 0, value: 'ready' });
