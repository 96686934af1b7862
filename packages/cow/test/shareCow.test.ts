import { expect } from 'chai';
import { cpu, createRuntime, DisposedError, InvalidArgumentError, StowageError, TrackingAllocator, wrapAllocators } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { collectSharedCow, cow, receiveCow, shareCow } from '@stowage/cow';

describe('shareCow / receiveCow', () => {
  it('frees the original data when the sender wrote its storage (dropping its reference) before the receiver released', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const count = (): number => rt.allocator().memoryStats()['allocation.all.current'];
    const baseline = count();
    const s = rt.storage(64, { shared: true });
    const handle = shareCow(rt, s);
    const received = receiveCow(rt, handle); // as a worker would
    rt.write(s, new Uint8Array([1])); // the sender keeps s but writes it: s copies, dropping its COW reference
    received.release(); // the receiver is done (in a worker, it cannot free the sender's allocation)
    s.release();
    expect(count() - baseline, 'the shared original waits for the sender to collect it').to.equal(1);
    expect(collectSharedCow(rt), 'the original 64 bytes are freed by the sender').to.equal(64);
    expect(count() - baseline, 'every storage released: nothing stays allocated').to.equal(0);
    expect(collectSharedCow(rt), 'freed once').to.equal(0);
  });

  it('never lets the sender steal data a receiver still reads when one handle is received twice (or refuses the second receive)', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const s = rt.storage(8, { shared: true });
    rt.write(s, new Uint8Array(8).fill(5));
    const handle = shareCow(rt, s); // e.g. posted to two workers
    const r1 = receiveCow(rt, handle);
    let r2;
    try {
      r2 = receiveCow(rt, handle);
    } catch (error) {
      expect(error, 'a refused second receive must be a typed error').to.be.instanceOf(StowageError);
      return;
    }
    r1.release();
    rt.write(s, new Uint8Array(8).fill(9)); // r2 is live, so s copies rather than steal the data and write it in place
    expect([...hostBytes(r2.data())], 'r2 must not see the sender\'s write').to.deep.equal(new Array(8).fill(5));
  });

  it('frees a shared original in the out-of-memory path when the cow plugin is registered', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true, limit: '64MiB' }), cow()] });
    const s = rt.storage(40 * 2 ** 20, { shared: true });
    const received = receiveCow(rt, shareCow(rt, s));
    s.release(); // the receiver still reads the original
    received.release(); // done: only the sender's pin is left, and nothing in this thread collects it yet
    const big = rt.storage(30 * 2 ** 20, { shared: true }); // fits only once the original is freed
    expect(big.byteLength).to.equal(30 * 2 ** 20);
    expect(collectSharedCow(rt), 'already collected by the allocator').to.equal(0);
  });

  it('forwards a received storage to a third thread without taking ownership: the original outlives both', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const count = (): number => rt.allocator().memoryStats()['allocation.all.current'];
    const baseline = count();
    const s = rt.storage(16, { shared: true });
    rt.write(s, new Uint8Array(16).fill(4));
    const first = receiveCow(rt, shareCow(rt, s));
    const second = receiveCow(rt, shareCow(rt, first)); // as the first worker would, to another
    s.release();
    first.release();
    expect([...hostBytes(second.data())], 'the original is still there').to.deep.equal(new Array(16).fill(4));
    expect(collectSharedCow(rt), 'still referenced').to.equal(0);
    second.release();
    expect(collectSharedCow(rt)).to.equal(16);
    expect(count() - baseline).to.equal(0);
  });

  it('rejects a descriptor whose range runs past its data with a typed error', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const valid = shareCow(rt, rt.storage(8, { shared: true }));
    const bad = [
      { ...valid, byteOffset: valid.data.byteLength - 4, byteLength: 16 },
      { ...valid, byteOffset: -4, byteLength: 4 },
      { ...valid, byteOffset: 0, byteLength: 1.5 },
      { ...valid, state: new SharedArrayBuffer(10) },
    ];
    for (const d of bad) {
      let error: unknown;
      try {
        const s = receiveCow(rt, d);
        hostBytes(s.data()); // if accepted, a read must work
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify({ byteOffset: d.byteOffset, byteLength: d.byteLength, state: d.state.byteLength })).to.be.instanceOf(StowageError);
    }
    expect(() => receiveCow(rt, valid).release(), 'the refused descriptors claimed nothing').not.to.throw();
  });
});

describe('collectSharedCow', () => {
  it("frees only its own runtime's shared originals: two runtimes in one thread do not see each other's pins", async () => {
    await using a = await createRuntime({ plugins: [cpu({ shared: true }), cow()] });
    await using b = await createRuntime({ plugins: [cpu({ shared: true })] });
    const live = (rt: typeof a): number => rt.allocator().memoryStats()['allocation.all.current'];
    const baseA = live(a);
    const baseB = live(b);
    const sa = a.storage(32, { shared: true });
    const sb = b.storage(48, { shared: true });
    const ra = receiveCow(a, shareCow(a, sa));
    const rb = receiveCow(b, shareCow(b, sb));
    for (const s of [sa, sb, ra, rb]) s.release(); // only each sender's pin is left
    expect(collectSharedCow(a), "a collects its 32 bytes, not b's").to.equal(32);
    expect(live(a) - baseA).to.equal(0);
    expect(live(b) - baseB, "b's original waits for b").to.equal(1);
    expect(collectSharedCow(a), 'nothing of b is in a').to.equal(0);
    expect(collectSharedCow(b)).to.equal(48);
    expect(live(b) - baseB).to.equal(0);
  });

  it('leaves a descriptor receivable when the receiving runtime refuses it (disposed), so the data is not pinned for good', async () => {
    await using sender = await createRuntime({ plugins: [cpu({ shared: true })] });
    const closed = await createRuntime({ plugins: [cpu({ shared: true })] });
    await closed.dispose();
    const live = (): number => sender.allocator().memoryStats()['allocation.all.current'];
    const baseline = live();
    const s = sender.storage(32, { shared: true });
    const handle = shareCow(sender, s);
    expect(() => receiveCow(closed, handle)).to.throw(DisposedError);
    receiveCow(sender, handle).release(); // received after all
    s.release(); // the last local storage: only the sender's pin was left, so the data goes
    collectSharedCow(sender);
    expect(live() - baseline, 'freed once the descriptor was received and released').to.equal(0);
  });

  it('refuses a disposed runtime with DisposedError', async () => {
    const rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    const s = rt.storage(64, { shared: true });
    shareCow(rt, s);
    await rt.dispose();
    expect(() => collectSharedCow(rt)).to.throw(DisposedError);
    expect(() => shareCow(rt, s)).to.throw(StowageError);
  });

  it('refuses a value that is not a runtime with InvalidArgumentError', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    expect(() => collectSharedCow({} as never)).to.throw(InvalidArgumentError, /Runtime/);
    expect(() => shareCow(null as never, rt.storage(8, { shared: true }))).to.throw(InvalidArgumentError, /Runtime/);
  });
});

describe('TrackingAllocator#outstanding with shared COW storages', () => {
  it('lists shared memory while a receiver may still use it, under the released first pointer, and drops it once collected', async () => {
    let tracker: TrackingAllocator | undefined;
    await using rt = await createRuntime({
      plugins: [cpu({ shared: true }), wrapAllocators('cpu', (a) => (tracker = new TrackingAllocator(a, { captureStacks: false })))],
    });
    const s = rt.storage(64, { shared: true });
    const handle = shareCow(rt, s);
    s.release(); // the descriptor still holds a reference: the memory is live
    expect(tracker!.outstanding().map((r) => [r.bytes, r.ptr.isReleased])).to.deep.equal([[64, true]]);
    receiveCow(rt, handle).release();
    expect(collectSharedCow(rt)).to.equal(64);
    expect(tracker!.outstanding(), 'freed through the tracker once the receiver is done').to.deep.equal([]);
  });
});
