import { expect } from 'chai';
import type { ChildProcess } from 'node:child_process';
import { fork } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import type { StorageImpl } from '@stowage/core';
import { createRuntime, isOutOfMemoryError } from '@stowage/core';
import type { CounterSlot } from '@stowage/ipc';
import { ipc, ipcCollect, ipcOf, sharedMemoryCpu, StorageQueue } from '@stowage/ipc';

const CONSUMERS = 4;
const STORAGES = 10_000;
const STORAGE_BYTES = 16 * 1024;
/** 4 MiB: 256 storages of 16 KiB at most, against 160 MiB sent in all: it fits only if the limbo is collected. */
const LIMIT = '4MiB';

function fill(s: StorageImpl, seq: number): void {
  const p = s.data();
  const words = new Uint32Array(p.handle as ArrayBuffer, p.byteOffset, p.byteLength >>> 2);
  words[0] = seq;
  for (let k = 1; k < words.length; k++) words[k] = (seq ^ Math.imul(k, 2654435761)) >>> 0;
}

describe('Ipc (stress: 4 consumer processes)', function () {
  this.timeout(120_000);

  it(`sends ${STORAGES} storages to ${CONSUMERS} consumer processes under a ${LIMIT} budget: contents intact, every counter at 0, the limbo empty, no /dev/shm object left`, async () => {
    const started = Date.now();
    const rt = await createRuntime({ plugins: [sharedMemoryCpu({ limit: LIMIT }), ipc({ limboWarningBytes: Infinity })] });
    const script = fileURLToPath(new URL('./stressConsumerChild.js', import.meta.url));
    const children: ChildProcess[] = [];
    const reports: Promise<{ received: number; mismatches: number }>[] = [];
    for (let i = 0; i < CONSUMERS; i++) {
      const child = fork(script, [String(i), String(CONSUMERS)], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      children.push(child);
      reports.push(
        new Promise((resolve, reject) => {
          child.on('message', (m: { stress?: { received: number; mismatches: number } }) => m.stress !== undefined && resolve(m.stress));
          child.once('exit', (code) => reject(new Error(`consumer ${i} exited with ${code} before reporting`)));
        }),
      );
    }
    const queues = children.map((c) => new StorageQueue(rt, c));
    const slots: CounterSlot[] = [];
    let waits = 0;
    let peakLimbo = 0;
    try {
      for (let seq = 0; seq < STORAGES; seq++) {
        let s: StorageImpl | undefined;
        while (s === undefined) {
          try {
            s = rt.storage(STORAGE_BYTES); // out of memory: the engine's chain collects the limbo first
          } catch (error) {
            if (!isOutOfMemoryError(error)) throw error;
            waits++; // every block is still held by a consumer: let them catch up
            await new Promise((r) => setTimeout(r, 1));
          }
        }
        fill(s, seq);
        slots.push(queues[seq % CONSUMERS]!.put(s).slot);
        s.release(); // a consumer holds it: into the limbo
        peakLimbo = Math.max(peakLimbo, ipcOf(rt).limboSize);
        if (seq % 64 === 63) await new Promise((r) => setImmediate(r)); // let the channels write
      }
      for (const q of queues) q.close();
      const results = await Promise.all(reports);
      expect(results.reduce((n, r) => n + r.received, 0), 'storages received').to.equal(STORAGES);
      expect(results.reduce((n, r) => n + r.mismatches, 0), 'storages whose contents changed while held').to.equal(0);
      ipcCollect(rt);
      expect(ipcOf(rt).limboSize, 'the limbo').to.equal(0);
      const counters = ipcOf(rt).counters;
      const nonZero = slots.filter((slot) => {
        try {
          return counters.count(slot) !== 0;
        } catch {
          return false; // done (only a slot at 0 is done) and its file unlinked with its last slot
        }
      });
      expect(nonZero.length, 'counters above 0').to.equal(0);
      expect(counters.fileNames.length, 'counter files left (the current one at most)').to.be.at.most(1);
      console.log(
        `      ${STORAGES} storages of ${STORAGE_BYTES} bytes to ${CONSUMERS} processes in ${Date.now() - started} ms; ` +
          `peak limbo ${peakLimbo} storages; ${waits} waits for consumers; per consumer ${results.map((r) => r.received).join(', ')}`,
      );
    } finally {
      for (const q of queues) q.close();
      await rt.dispose();
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    }
    const pids = [process.pid, ...children.map((c) => c.pid)];
    const left = readdirSync('/dev/shm').filter((n) => pids.some((pid) => n.startsWith(`stowage-ipc-${pid}-`)));
    expect(left, 'shared-memory objects left').to.deep.equal([]);
  });
});
