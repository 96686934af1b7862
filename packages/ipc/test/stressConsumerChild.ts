// A consumer process of the IPC stress test (argv[2]: its index i of argv[3] consumers): gets storages from the
// parent's queue until it closes and holds the last HELD of them; checks each one's contents when it arrives and
// again just before releasing it (word 0 is its sequence number, which must be i, i + n, i + 2n… in order; word k is
// seq ^ k·2654435761), so memory the producer freed or reused while held shows; reports { received, mismatches }.
import 'reflect-metadata';

import { createRuntime } from '@stowage/core';
import type { ReceivedStorage } from '@stowage/ipc';
import { ipc, StorageQueue } from '@stowage/ipc';

const HELD = 8;
const index = Number(process.argv[2]);
const consumers = Number(process.argv[3]);

const rt = await createRuntime({ plugins: [ipc()] });
const queue = new StorageQueue(rt, process);
let received = 0;
let mismatches = 0;
const held: { r: ReceivedStorage; seq: number }[] = [];

/** True when `r` still holds exactly storage `seq`'s contents. */
function intact(r: ReceivedStorage, seq: number): boolean {
  const p = r.storage.data();
  const words = new Uint32Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength >>> 2);
  if (words[0] !== seq) return false;
  for (let k = 1; k < words.length; k++) if (words[k] !== (seq ^ Math.imul(k, 2654435761)) >>> 0) return false;
  return true;
}

function releaseOldest(): void {
  const { r, seq } = held.shift()!;
  if (!intact(r, seq)) mismatches++;
  r.release();
}

for await (const r of queue) {
  const seq = index + received * consumers;
  if (!intact(r, seq)) mismatches++;
  held.push({ r, seq });
  if (held.length > HELD) releaseOldest();
  received++;
}
while (held.length > 0) releaseOldest();
await rt.dispose();
process.send!({ stress: { received, mismatches } }, () => process.disconnect());
