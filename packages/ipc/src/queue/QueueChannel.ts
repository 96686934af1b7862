import type { ChildProcess } from 'node:child_process';
import type { MessagePort } from 'node:worker_threads';

import { DisposedError, InvalidArgumentError } from '@stowage/core';

/** What a StorageQueue carries its messages over: a worker_threads MessagePort, or a child process's IPC channel. */
export type QueueTransport = MessagePort | ChildProcess | NodeJS.Process;

/** The queue's view of its transport. */
export interface QueueChannel {
  /** True for a process's channel: only `shm` memory crosses, and foreign messages are someone else's. */
  readonly crossesProcesses: boolean;
  /** Posts `message`; `transfer` (ports only) moves MessagePorts with it. */
  post(message: unknown, transfer?: readonly MessagePort[]): void;
  listen(onMessage: (message: unknown) => void, onClose: () => void): void;
  unlisten(): void;
  /** Ends the transport where the queue owns it (a port); a process channel is left open for its other users. */
  close(): void;
  ref(): void;
  unref(): void;
}

interface ProcessLike {
  send?: (message: unknown) => boolean;
  connected?: boolean;
  on(event: string, listener: (...args: never[]) => void): unknown;
  off(event: string, listener: (...args: never[]) => void): unknown;
}

/**
 * Wraps `transport`.
 * @throws InvalidArgumentError for anything but a MessagePort, a ChildProcess forked with an IPC channel, or a
 *   process that has one (a forked child's `process`)
 */
export function queueChannel(transport: QueueTransport): QueueChannel {
  const t = transport as Partial<MessagePort> & Partial<ProcessLike>;
  if (typeof t === 'object' && t !== null && typeof t.postMessage === 'function' && typeof t.on === 'function') return portChannel(transport as MessagePort);
  if (typeof t === 'object' && t !== null && typeof t.send === 'function' && typeof t.on === 'function') return processChannel(transport as unknown as ProcessLike);
  throw new InvalidArgumentError(
    'transport',
    transport,
    "a worker_threads MessagePort (one end of a MessageChannel), a ChildProcess forked with { serialization: 'advanced' }, or a forked child's process",
  );
}

function portChannel(port: MessagePort): QueueChannel {
  let listeners: { message: (m: unknown) => void; close: () => void } | undefined;
  return {
    crossesProcesses: false,
    post: (message, transfer) => port.postMessage(message, transfer === undefined ? undefined : [...transfer]),
    listen(onMessage, onClose) {
      listeners = { message: onMessage, close: onClose };
      port.on('message', onMessage);
      port.on('close', onClose);
    },
    unlisten() {
      if (listeners === undefined) return;
      port.off('message', listeners.message);
      port.off('close', listeners.close);
    },
    close: () => port.close(),
    ref: () => port.ref(),
    unref: () => port.unref(),
  };
}

function processChannel(p: ProcessLike): QueueChannel {
  let listeners: { message: (m: unknown) => void; close: () => void } | undefined;
  return {
    crossesProcesses: true,
    post(message) {
      if (p.connected === false) throw new DisposedError('The IPC channel of the process is disconnected.');
      p.send!(message);
    },
    listen(onMessage, onClose) {
      listeners = { message: onMessage, close: onClose };
      p.on('message', onMessage as (...args: never[]) => void);
      p.on('disconnect', onClose);
    },
    unlisten() {
      if (listeners === undefined) return;
      p.off('message', listeners.message as (...args: never[]) => void);
      p.off('disconnect', listeners.close);
    },
    close: () => {},
    // Node counts the channel's 'message' listeners as references: the queue's keeps the channel referenced until
    // close() removes it. An explicit unref() here would also drop the references of the channel's other users.
    ref: () => {},
    unref: () => {},
  };
}
