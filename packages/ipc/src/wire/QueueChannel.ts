import type { ChildProcess } from 'node:child_process';
import { Duplex } from 'node:stream';
import type { MessagePort } from 'node:worker_threads';
import { Worker } from 'node:worker_threads';

import { DisposedError, InvalidArgumentError } from '@stowage/core';

/**
 * What a StorageQueue carries its messages over: a worker_threads MessagePort (one end of a MessageChannel, or a
 * worker's `parentPort`), a `Worker` (its own message port; the queue never terminates it), a child process's IPC
 * channel, or a byte stream (`stream.Duplex`: a `net.Socket`, a child's stdio pair…) the queue then owns.
 */
export type QueueTransport = MessagePort | Worker | ChildProcess | NodeJS.Process | Duplex;

/** The queue's view of its transport. */
export interface QueueChannel {
  /** True for a process's channel: only `shm` memory crosses, and foreign messages are someone else's. */
  readonly crossesProcesses: boolean;
  /** False for a process's channel, whose messages that are not the queue's belong to its other listeners. */
  readonly exclusive: boolean;
  /** False once the transport can carry nothing more (a disconnected channel, an ended stream). */
  isOpen(): boolean;
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
 * @throws InvalidArgumentError for anything but a MessagePort, a Worker, a ChildProcess forked with an IPC channel
 *   and `serialization: 'advanced'`, or a process that has one (a forked child's `process`)
 */
export function queueChannel(transport: QueueTransport): QueueChannel {
  const t = transport as Partial<MessagePort> & Partial<ProcessLike>;
  if (transport instanceof Worker) return workerChannel(transport);
  if (typeof t === 'object' && t !== null && typeof t.postMessage === 'function' && typeof t.on === 'function') return portChannel(transport as MessagePort);
  if (transport instanceof Duplex) return streamChannel(transport);
  if (typeof t === 'object' && t !== null && typeof t.send === 'function' && typeof t.on === 'function') {
    if (serializationOf(transport) === 'json') {
      throw new InvalidArgumentError(
        'transport',
        transport,
        "a process channel with serialization 'advanced' (fork the child with { serialization: 'advanced' }): the default JSON serialization cannot carry a descriptor's bigint nonce",
      );
    }
    return processChannel(transport as unknown as ProcessLike);
  }
  throw new InvalidArgumentError(
    'transport',
    transport,
    "a worker_threads MessagePort (one end of a MessageChannel), a ChildProcess forked with { serialization: 'advanced' }, a forked child's process, or a stream.Duplex (a net.Socket)",
  );
}

function portChannel(port: MessagePort): QueueChannel {
  // A closed port drops what is posted; the queue learns of it through 'close'. The queue owns its port.
  return messageChannel(port, 'close', () => true, { close: () => port.close(), ref: () => port.ref(), unref: () => port.unref() });
}

/** A Worker's own port: the queue listens until the worker exits, and never terminates it (the caller owns it). */
function workerChannel(worker: Worker): QueueChannel {
  // The worker's reference to the event loop is its owner's to set; the queue's listeners add none.
  return messageChannel(worker, 'exit', () => worker.threadId !== -1, { close: () => {}, ref: () => {}, unref: () => {} });
}

/** The channel over what posts structured-clone messages within this process: a MessagePort or a Worker. */
function messageChannel(
  target: MessagePort | Worker,
  closeEvent: 'close' | 'exit',
  isOpen: () => boolean,
  ownership: Pick<QueueChannel, 'close' | 'ref' | 'unref'>,
): QueueChannel {
  let listeners: { message: (m: unknown) => void; close: () => void } | undefined;
  return {
    crossesProcesses: false,
    exclusive: true,
    isOpen,
    post: (message, transfer) => target.postMessage(message, transfer === undefined ? undefined : [...transfer]),
    listen(onMessage, onClose) {
      listeners = { message: onMessage, close: onClose };
      target.on('message', onMessage);
      target.on(closeEvent, onClose);
    },
    unlisten() {
      if (listeners === undefined) return;
      target.off('message', listeners.message);
      target.off(closeEvent, listeners.close);
    },
    ...ownership,
  };
}

/**
 * The serialization of a process's IPC channel, where Node shows it: its channel handle holds a JSON buffer
 * (`'json'`, the default) or a message buffer (`'advanced'`); undefined where it cannot be told (another Node),
 * and the first `put` reports a JSON channel then.
 */
function serializationOf(process: object): 'json' | 'advanced' | undefined {
  const handleKey = Object.getOwnPropertySymbols(process).find((s) => s.description === 'kChannelHandle');
  const handle = handleKey === undefined ? undefined : (process as Record<symbol, unknown>)[handleKey];
  if (typeof handle !== 'object' || handle === null) return undefined;
  const names = Object.getOwnPropertySymbols(handle).map((s) => s.description);
  if (names.includes('kJSONBuffer')) return 'json';
  if (names.includes('kMessageBuffer')) return 'advanced';
  return undefined;
}

function processChannel(p: ProcessLike): QueueChannel {
  let listeners: { message: (m: unknown) => void; close: () => void } | undefined;
  return {
    crossesProcesses: true,
    exclusive: false,
    isOpen: () => p.connected !== false,
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

/** The largest frame a stream channel takes (a descriptor is a few hundred bytes; anything bigger is not ours). */
const MAX_FRAME_BYTES = 1 << 20;

/**
 * Note [Stream frames]: over a byte stream each message is one frame, a 4-byte big-endian length and that many
 * bytes of UTF-8 JSON. JSON has no bigint (a counter slot's nonce) or bytes (a legacy CUDA handle): they are written
 * as `{ "$bigint": "123" }` and `{ "$bytes": "<base64>" }`. A frame that is not valid JSON is handed on as a
 * string (the queue refuses it as a malformed message and goes on); a length over 1 MiB means the stream is not a
 * queue's, and the channel ends (as if the other end closed). Only memory that names itself crosses a stream
 * (POSIX shared memory, CUDA exports): no SharedArrayBuffer, no MessagePort.
 */
function streamChannel(stream: Duplex): QueueChannel {
  let listeners: { data: (chunk: Buffer) => void; close: () => void } | undefined;
  const socket = stream as Duplex & { ref?: () => void; unref?: () => void };
  return {
    crossesProcesses: true,
    exclusive: true,
    isOpen: () => !(stream.destroyed || stream.writableEnded),
    post(message) {
      if (stream.destroyed || stream.writableEnded) throw new DisposedError('The stream of the queue is closed.');
      const body = Buffer.from(JSON.stringify(message, (_key, value: unknown) => encodeValue(value)));
      const header = Buffer.alloc(4);
      header.writeUInt32BE(body.byteLength);
      stream.write(Buffer.concat([header, body]));
    },
    listen(onMessage, onClose) {
      let pending: Buffer = Buffer.alloc(0);
      let ended = false;
      const close = (): void => {
        if (ended) return;
        ended = true;
        onClose();
      };
      const data = (chunk: Buffer): void => {
        pending = pending.byteLength === 0 ? chunk : Buffer.concat([pending, chunk]);
        while (!ended && pending.byteLength >= 4) {
          const length = pending.readUInt32BE(0);
          if (length > MAX_FRAME_BYTES) {
            pending = Buffer.alloc(0);
            close();
            return;
          }
          if (pending.byteLength < 4 + length) return;
          const text = pending.toString('utf8', 4, 4 + length);
          pending = pending.subarray(4 + length);
          let message: unknown;
          try {
            message = JSON.parse(text, (_key, value: unknown) => decodeValue(value));
          } catch {
            message = text;
          }
          onMessage(message);
        }
      };
      listeners = { data, close };
      stream.on('data', data);
      stream.on('end', close);
      stream.on('close', close);
      stream.on('error', close);
    },
    unlisten() {
      if (listeners === undefined) return;
      stream.off('data', listeners.data);
      stream.off('end', listeners.close);
      stream.off('close', listeners.close);
      stream.off('error', listeners.close);
    },
    close: () => {
      stream.end();
    },
    ref: () => socket.ref?.(),
    unref: () => socket.unref?.(),
  };
}

function encodeValue(value: unknown): unknown {
  if (typeof value === 'bigint') return { $bigint: value.toString() };
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
  return value;
}

function decodeValue(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const v = value as { $bigint?: unknown; $bytes?: unknown };
  const keys = Object.keys(v);
  if (keys.length !== 1) return value;
  if (typeof v.$bigint === 'string' && /^-?[0-9]{1,20}$/.test(v.$bigint)) return BigInt(v.$bigint);
  if (typeof v.$bytes === 'string') return Uint8Array.from(Buffer.from(v.$bytes, 'base64'));
  return value;
}
