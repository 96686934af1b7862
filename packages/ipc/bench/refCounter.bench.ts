// The cost of the ref-counter operations, one JSON line per scenario, then the environment:
// - atomics floor: Atomics.add(+1) then a compare-exchange decrement on one int64 of a shared mapping;
// - send cycle: RefCounterFiles#increment, RefCounterClient#acquire, #release on one slot (a send and its release);
// - slot lifetime: allocate, increment, acquire, release, done (a new 256 KiB file every 4096 slots, unlinked when
//   its last slot is done), with the consumer keeping one idle file mapped (the default) and with none (every
//   acquire maps the file, every release unmaps it);
// - reclaimDead over 4096 live slots held by a live consumer thread (the scan, nothing reclaimed).
// Run: pnpm exec tsc -b tsconfig.json tsconfig.test.json && node packages/ipc/dist-bench/refCounter.bench.js
import os from 'node:os';

import { timePerCall } from '@stowage/bench-kit';
import { RefCounterClient, RefCounterFiles, SharedMemoryFile } from '@stowage/ipc/testing';

const line = (scenario: string, nsPerCall: number, extra: object = {}): void =>
  console.log(JSON.stringify({ scenario, nsPerCall: Number(nsPerCall.toFixed(1)), ...extra }));

{
  using f = SharedMemoryFile.create(64);
  const words = new BigInt64Array(f.buffer);
  line('atomics floor (add, then compare-exchange decrement)', timePerCall(() => {
    Atomics.add(words, 0, 1n);
    const v = Atomics.load(words, 0);
    Atomics.compareExchange(words, 0, v, v - 1n);
  }));
  f.unlink();
}

{
  using files = new RefCounterFiles();
  using client = new RefCounterClient();
  const slot = files.allocate();
  line('send cycle (increment, acquire, release)', timePerCall(() => {
    files.increment(slot);
    client.acquire(slot);
    client.release(slot);
  }));
}

for (const idleFiles of [1, 0]) {
  using files = new RefCounterFiles();
  using client = new RefCounterClient({ idleFiles });
  line('slot lifetime (allocate, increment, acquire, release, done)', timePerCall(() => {
    const slot = files.allocate();
    files.increment(slot);
    client.acquire(slot);
    client.release(slot);
    files.done(slot);
  }), { idleFiles });
}

{
  using files = new RefCounterFiles();
  using client = new RefCounterClient({ threadId: 1 });
  for (let i = 0; i < 4096; i++) {
    const slot = files.allocate();
    files.increment(slot);
    client.acquire(slot);
  }
  line('reclaimDead over 4096 held slots (none dead)', timePerCall(() => void files.reclaimDead(new Set([2]))));
}

console.log(JSON.stringify({ scenario: 'environment', node: process.version, cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, date: new Date().toISOString() }));
