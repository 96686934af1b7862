import { expect } from 'chai';
import { Worker } from 'node:worker_threads';
import type { CowContext } from '@stowage/cow';
import { cpu, createRuntime } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { collectSharedCow, materialize, shareCow } from '@stowage/cow';

describe('COW across worker_threads', function () {
  this.timeout(60_000);

  it('lets 4 workers clone and materialize shared storages concurrently: no lost write, originals untouched, every reference freed', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const allocator = rt.allocator();
    const baseline = allocator.memoryStats()['allocation.all.current'];
    const originals = [11, 22, 33, 44, 55, 66];
    const storages = originals.map((v) => {
      const s = rt.storage(64 * 1024, { shared: true });
      rt.write(s, new Uint8Array(s.byteLength).fill(v));
      return s;
    });
    const workers = [0, 1, 2, 3].map((worker) => {
      const shared = storages.map((s) => shareCow(rt, s));
      return new Promise<{ errors: string[]; copies: number }>((resolve, reject) => {
        const w = new Worker(new URL('./cowWorker.js', import.meta.url), { workerData: { worker, iterations: 60, shared, originals } });
        w.once('message', resolve);
        w.once('error', reject);
      });
    });
    const results = await Promise.all(workers);
    expect(results.flatMap((r) => r.errors)).to.deep.equal([]);
    expect(results.reduce((n, r) => n + r.copies, 0)).to.equal(4 * 60 * originals.length);
    storages.forEach((s, i) => {
      expect((s.peekDataPtr().context as CowContext).references, `storage ${i}: only this thread's reference is left`).to.equal(1);
      expect(hostBytes(s.data()).every((b) => b === originals[i])).to.equal(true);
      expect(materialize(s), 'the last reference keeps the data').to.equal('stolen');
    });
    expect(allocator.memoryStats()['allocation.all.current'] - baseline).to.equal(originals.length);
    for (const s of storages) s.release();
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(baseline);
  });

  it('frees the shared originals in the sending thread once the workers are done, when the sender wrote its own storages first', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const allocator = rt.allocator();
    const baseline = allocator.memoryStats()['allocation.all.current'];
    const originals = [7, 8, 9];
    const storages = originals.map((v) => {
      const s = rt.storage(4096, { shared: true });
      rt.write(s, new Uint8Array(s.byteLength).fill(v));
      return s;
    });
    const workers = [0, 1].map((worker) => {
      const shared = storages.map((s) => shareCow(rt, s));
      return new Promise<{ errors: string[]; copies: number }>((resolve, reject) => {
        const w = new Worker(new URL('./cowWorker.js', import.meta.url), { workerData: { worker, iterations: 10, shared, originals } });
        w.once('message', resolve);
        w.once('error', reject);
      });
    });
    // The sender writes its own storages while the workers may still read the originals: each copies.
    for (const s of storages) rt.write(s, new Uint8Array(s.byteLength).fill(1));
    const results = await Promise.all(workers);
    expect(results.flatMap((r) => r.errors), 'the workers never saw the sender\'s writes').to.deep.equal([]);
    expect(allocator.memoryStats()['allocation.all.current'] - baseline, 'the originals wait for the sender').to.equal(2 * originals.length);
    expect(collectSharedCow(rt), 'the sender frees the originals').to.equal(4096 * originals.length);
    expect(allocator.memoryStats()['allocation.all.current'] - baseline, 'only its own copies are left').to.equal(originals.length);
    for (const s of storages) expect(hostBytes(s.data()).every((b) => b === 1)).to.equal(true);
  });
});
