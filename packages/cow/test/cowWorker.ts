// A worker of CowWorkers.test.ts: receives lazy copies of shared storages, clones and writes them, checks them.
import 'reflect-metadata';
import { parentPort, workerData } from 'node:worker_threads';
import { cpu, createRuntime } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import type { SharedCowStorage } from '@stowage/cow';
import { lazyClone, receiveCow } from '@stowage/cow';

interface Job {
  readonly worker: number;
  readonly iterations: number;
  readonly shared: readonly SharedCowStorage[];
  /** Byte value each original storage holds. */
  readonly originals: readonly number[];
}

const job = workerData as Job;
const errors: string[] = [];
const rt = await createRuntime({ plugins: [cpu({ shared: true })] });
const storages = job.shared.map((d) => receiveCow(rt, d));
let copies = 0;
for (let it = 0; it < job.iterations; it++) {
  storages.forEach((s, i) => {
    const clone = lazyClone(s)!;
    const mine = (job.worker * 16 + it) & 0xff;
    if (hostBytes(clone.data())[0] !== job.originals[i]) errors.push(`clone of storage ${i} read ${hostBytes(clone.data())[0]} before any write`);
    rt.write(clone, new Uint8Array(clone.byteLength).fill(mine)); // materializes: a copy under the shared lock
    copies++;
    const after = hostBytes(clone.data());
    if (after.some((b) => b !== mine)) errors.push(`clone of storage ${i} lost its write in iteration ${it}`);
    if (hostBytes(s.data()).some((b) => b !== job.originals[i])) errors.push(`storage ${i} was disturbed in iteration ${it}`);
    clone.release();
  });
}
for (const s of storages) s.release();
await rt.dispose();
parentPort!.postMessage({ errors, copies });
