// A producer child process for the StorageQueue tests: a sharedMemoryCpu() runtime with ipc() that puts storages on
// this process's IPC channel when told ({ cmd: { id, op: 'put', bytes, value, device } }) and exits when told
// ({ op: 'exit', dispose }), with or without disposing its runtime first. With STOWAGE_LIBCUDA set, the runtime also
// has CUDA (that libcuda), and `device: 'cuda:0'` puts a CUDA storage.
import 'reflect-metadata';

import { cuda } from '@stowage/allocator-cuda';
import { createRuntime } from '@stowage/core';
import { ipc, sharedMemoryCpu, StorageQueue } from '@stowage/ipc';

interface ProducerCommand {
  readonly id: number;
  readonly op: 'put' | 'exit';
  readonly bytes?: number;
  readonly value?: number;
  readonly dispose?: boolean;
  readonly device?: string;
}

const libcuda = process.env['STOWAGE_LIBCUDA'];
const rt = await createRuntime({ plugins: [...(libcuda === undefined ? [] : [cuda({ libcuda, allocConf: '' })]), sharedMemoryCpu(), ipc()] });
const queue = new StorageQueue(rt, process);

process.on('message', (m: { cmd?: ProducerCommand }) => {
  const c = m.cmd;
  if (c === undefined) return;
  if (c.op === 'put') {
    const device = c.device ?? 'cpu:0';
    const s = rt.storage(c.bytes ?? 64, { device });
    rt.allocator(device).writeBytes(s.data(), new Uint8Array(s.byteLength).fill(c.value ?? 0));
    const d = queue.put(s);
    s.release(); // the consumer holds it: it waits in the limbo
    process.send!({ reply: { id: c.id, value: (d.memory as { name?: string }).name ?? null } });
    return;
  }
  void (async () => {
    if (c.dispose === true) {
      queue.close();
      await rt.dispose();
    }
    process.exit(0);
  })();
});
process.send!({ reply: { id: 0, value: 'ready' } });
