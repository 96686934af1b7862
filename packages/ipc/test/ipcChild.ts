// A child process for the IPC tests: reads one JSON command per line on stdin and answers one JSON line on stdout.
// Bigints (nonces) travel as strings. State (a producer, a consumer) lives in this process until it exits.
import { openSync } from 'node:fs';
import { createInterface } from 'node:readline';

import type { CounterSlot } from '@stowage/ipc';
import { RefCounterClient, RefCounterFiles, SharedMemoryFile } from '@stowage/ipc/testing';

import type { WireSlot } from './childProcess.js';

const fromWire = (s: WireSlot): CounterSlot => ({ file: s.file, slot: s.slot, nonce: BigInt(s.nonce) });
const toWire = (s: CounterSlot): WireSlot => ({ file: s.file, slot: s.slot, nonce: String(s.nonce) });

let client: RefCounterClient | undefined;
let producer: RefCounterFiles | undefined;
const consumer = (): RefCounterClient => (client ??= new RefCounterClient({ idleFiles: 0 }));

/** Waits at a two-word barrier in shared memory: announces readiness in word 1, spins until word 0 is set. */
function barrier(name: string): void {
  const f = SharedMemoryFile.open(name);
  const words = new Int32Array(f.buffer);
  Atomics.add(words, 1, 1);
  while (Atomics.load(words, 0) === 0);
  f.close();
}

type Command = Record<string, unknown> & { op: string };

function run(c: Command): unknown {
  switch (c.op) {
    case 'pid':
      return { pid: process.pid };
    case 'shmRead': {
      using f = SharedMemoryFile.open(c['name'] as string);
      return { byteLength: f.byteLength, bytes: [...new Uint8Array(f.buffer, 0, c['length'] as number)] };
    }
    case 'shmWrite': {
      using f = SharedMemoryFile.open(c['name'] as string);
      new Uint8Array(f.buffer).set(c['bytes'] as number[], c['offset'] as number);
      return {};
    }
    case 'shmAdd': {
      barrier(c['barrier'] as string);
      using f = SharedMemoryFile.open(c['name'] as string);
      const words = new BigInt64Array(f.buffer);
      for (let i = c['times'] as number; i > 0; i--) Atomics.add(words, 0, 1n);
      return {};
    }
    case 'openFile':
      return { fd: openSync(c['path'] as string, 'r') };
    case 'acquire':
      for (let i = (c['times'] as number | undefined) ?? 1; i > 0; i--) consumer().acquire(fromWire(c['slot'] as WireSlot));
      return {};
    case 'release': {
      if (c['barrier'] !== undefined) barrier(c['barrier'] as string);
      for (let i = (c['times'] as number | undefined) ?? 1; i > 0; i--) consumer().release(fromWire(c['slot'] as WireSlot));
      return {};
    }
    case 'produce': {
      producer ??= new RefCounterFiles({ slotsPerFile: c['slotsPerFile'] as number });
      const slots: WireSlot[] = [];
      for (let i = c['n'] as number; i > 0; i--) {
        const s = producer.allocate();
        producer.increment(s);
        slots.push(toWire(s));
      }
      return { slots };
    }
    case 'exit':
      client?.close();
      producer?.close();
      setImmediate(() => process.exit(0));
      return {};
    default:
      throw new Error(`unknown command ${c.op}`);
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  let answer: unknown;
  try {
    answer = { ok: true, ...(run(JSON.parse(line) as Command) as object) };
  } catch (error) {
    const e = error as Error & { code?: string };
    answer = { ok: false, name: e.name, code: e.code, message: e.message };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
