// A child process for the StorageQueue tests: a consumer runtime with ipc(), a StorageQueue over this process's IPC
// channel, and commands from the test on the same channel ({ cmd }), each answered with { reply: { id, value | error } }.
import 'reflect-metadata';

import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { connect } from 'node:net';

import { cuda } from '@stowage/allocator-cuda';
import { createRuntime, isStowageError } from '@stowage/core';
import type { ReceivedStorage } from '@stowage/ipc';
import { ipc, StorageQueue } from '@stowage/ipc';

import { drainQueue } from './drainQueue.js';

export interface ChildCommand {
  readonly id: number;
  readonly op: string;
  readonly key?: string;
  readonly value?: number;
}

// With STOWAGE_LIBCUDA set, the runtime also has CUDA (that libcuda) to open CUDA storages.
const libcuda = process.env['STOWAGE_LIBCUDA'];
const rt = await createRuntime({ plugins: libcuda === undefined ? [ipc()] : [cuda({ libcuda, allocConf: '' }), ipc()] });
// With STOWAGE_QUEUE_SOCKET set, the queue runs over a Unix socket to that path (the commands stay on the channel).
const socketPath = process.env['STOWAGE_QUEUE_SOCKET'];
const transport = socketPath === undefined ? process : await new Promise<Socket>((resolve, reject) => {
  const socket = connect(socketPath, () => resolve(socket));
  socket.once('error', reject);
});
// With STOWAGE_QUEUE_BATCH=1, the queue batches its puts (Note [Batched puts]) even on this shared channel.
const queue = new StorageQueue(rt, transport, { batch: process.env['STOWAGE_QUEUE_BATCH'] === '1' });
const held = new Map<string, ReceivedStorage>();

/** The bytes of a received storage: its view on the host, or a read through its CUDA allocator. */
async function bytesOf(r: ReceivedStorage): Promise<number[]> {
  if (r.descriptor.device.startsWith('cpu')) return [...r.bytes()];
  return [...(await rt.allocator(r.descriptor.device).readBytes(r.storage.data()))];
}

function fill(r: ReceivedStorage, value: number): void {
  if (r.descriptor.device.startsWith('cpu')) r.bytes().fill(value);
  else rt.allocator(r.descriptor.device).writeBytes(r.storage.data(), new Uint8Array(r.byteLength).fill(value));
}

async function run(c: ChildCommand): Promise<unknown> {
  const received = (): ReceivedStorage => {
    const r = held.get(c.key ?? '');
    if (r === undefined) throw new Error(`nothing held as ${c.key}`);
    return r;
  };
  switch (c.op) {
    case 'get': {
      const r = await queue.get();
      held.set(c.key ?? '', r);
      const bytes = c.value === 1 ? [] : await bytesOf(r); // value 1: no bytes back (big storages: 'digest' them)
      return { byteLength: r.byteLength, bytes, memory: r.descriptor.memory.kind, device: r.descriptor.device };
    }
    case 'drain': // gets storages and releases each: their first bytes, in order
      return drainQueue(queue, c.value ?? 0);
    case 'read':
      return bytesOf(received());
    case 'digest':
      return createHash('sha256').update(Uint8Array.from(await bytesOf(received()))).digest('hex');
    case 'write':
      fill(received(), c.value ?? 0);
      return null;
    case 'release':
      received().release();
      return null;
    case 'readAfterRelease':
      return received().bytes();
    case 'exit':
      queue.close();
      await rt.dispose();
      setImmediate(() => process.disconnect());
      return null;
    default:
      throw new Error(`unknown op ${c.op}`);
  }
}

process.on('message', (m: { cmd?: ChildCommand }) => {
  const c = m.cmd;
  if (c === undefined) return;
  run(c).then(
    (value) => process.send!({ reply: { id: c.id, value } }),
    (error: unknown) =>
      process.send!({ reply: { id: c.id, error: { name: (error as Error).name, code: isStowageError(error) ? error.code : undefined, message: (error as Error).message } } }),
  );
});
process.send!({ reply: { id: 0, value: 'ready' } });
