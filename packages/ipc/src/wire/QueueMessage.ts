import { MessagePort } from 'node:worker_threads';

import { InvalidArgumentError } from '@stowage/core';

import type { StorageDescriptor } from './StorageDescriptor.js';
import { checkStorageDescriptor } from './StorageDescriptor.js';

/** What a StorageQueue posts on its transport (a port, a process channel, or a stream's frames: Note [Stream frames] in QueueChannel.ts). */
export type QueueMessage =
  | { readonly stowage: 'ipc.storage'; readonly descriptor: StorageDescriptor }
  /** Several puts in one message (Note [Batched puts] in StorageQueue.ts). */
  | { readonly stowage: 'ipc.storages'; readonly descriptors: readonly StorageDescriptor[] }
  | { readonly stowage: 'ipc.close' }
  /** From the consumer: it took the file descriptors of the export sent with `slot`; the producer closes its copies. */
  | { readonly stowage: 'ipc.ack'; readonly file: string; readonly slot: number }
  /** Over a MessagePort, once per end: the sender's identity and its liveness port (Note [Dead consumers] in producer/ThreadLiveness.ts). */
  | { readonly stowage: 'ipc.hello'; readonly pid: number; readonly threadId: number; readonly alive: MessagePort };

/** True for the messages a StorageQueue takes from a process channel it shares with other code (`ipc.hello` travels on ports only). */
export function isQueueMessage(message: unknown): boolean {
  const kind = typeof message === 'object' && message !== null ? (message as { stowage?: unknown }).stowage : undefined;
  return kind === 'ipc.storage' || kind === 'ipc.storages' || kind === 'ipc.close' || kind === 'ipc.ack';
}

/** True for a well-formed `ipc.hello` (Note [Dead consumers] in producer/ThreadLiveness.ts). */
export function isHelloMessage(message: unknown): message is { pid: number; threadId: number; alive: MessagePort } {
  const m = message as { stowage?: unknown; pid?: unknown; threadId?: unknown; alive?: unknown } | null;
  return (
    typeof m === 'object' && m !== null && m.stowage === 'ipc.hello' && Number.isSafeInteger(m.pid) && Number.isSafeInteger(m.threadId) && m.alive instanceof MessagePort
  );
}

/** True for a well-formed `ipc.ack` (Note [CUDA over IPC] in consumer/Receiver.ts). */
export function isAckMessage(message: unknown): message is { file: string; slot: number } {
  const m = message as { stowage?: unknown; file?: unknown; slot?: unknown } | null;
  return typeof m === 'object' && m !== null && m.stowage === 'ipc.ack' && typeof m.file === 'string' && Number.isSafeInteger(m.slot);
}

/** True for `ipc.close`: the other end closed the queue. */
export function isCloseMessage(message: unknown): boolean {
  return typeof message === 'object' && message !== null && (message as { stowage?: unknown }).stowage === 'ipc.close';
}

/**
 * The descriptor of an `ipc.storage` message, its shape checked.
 * @throws InvalidArgumentError for anything else, or a malformed descriptor (`checkStorageDescriptor`)
 */
export function descriptorOf(message: unknown): StorageDescriptor {
  const m = message as { stowage?: unknown; descriptor?: unknown } | null;
  if (typeof m !== 'object' || m === null || m.stowage !== 'ipc.storage') {
    throw new InvalidArgumentError('message', message, "a StorageQueue message ({ stowage: 'ipc.storage', descriptor }); something else was posted on the queue's port");
  }
  checkStorageDescriptor(m.descriptor);
  return m.descriptor;
}
