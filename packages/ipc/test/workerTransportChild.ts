// A worker thread for the StorageQueue test of a Worker as the transport: its queue runs over parentPort, gets one
// storage, and answers its first byte on the port in workerData (the queue's port carries only the queue's messages).
import 'reflect-metadata';

import type { MessagePort } from 'node:worker_threads';
import { parentPort, workerData } from 'node:worker_threads';

import { cpu, createRuntime } from '@stowage/core';
import { ipc, StorageQueue } from '@stowage/ipc';

const rt = await createRuntime({ plugins: [cpu({ shared: true }), ipc({ deadCheckIntervalMs: 0 })] });
const queue = new StorageQueue(rt, parentPort!);
const received = await queue.get();
const first = received.bytes()[0];
received.release();
(workerData as { reply: MessagePort }).reply.postMessage(first);
