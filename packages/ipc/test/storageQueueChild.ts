// A child process for the StorageQueue tests: a consumer runtime with ipc(), a StorageQueue over this process's IPC
// channel, and commands from the test on the same channel ({ cmd }), each answered with { reply: { id, value | error } }.
import 'reflect-metadata';

import { createRuntime, isStowageError } from '@stowage/core';
import type { ReceivedStorage } from '@stowage/ipc';
import { ipc, StorageQueue } from '@stowage/ipc';

export interface ChildCommand {
  readonly id: number;
  readonly op: string;
  readonly key?: string;
  readonly value?: number;
}

const rt = await createRuntime({ plugins: [ipc()] });
const queue = new StorageQueue(rt, process);
const held = new Map<string, ReceivedStorage>();

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
      return { byteLength: r.byteLength, bytes: [...r.bytes()], memory: r.descriptor.memory.kind };
    }
    case 'read':
      return [...received().bytes()];
    case 'write':
      received().bytes().fill(c.value ?? 0);
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
