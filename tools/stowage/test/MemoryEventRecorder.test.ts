import { expect } from 'chai';
import { CachingAllocator, cpu, createRuntime, parseDevice, resolve } from '@stowage/core';
import { VirtualMemoryBackend } from '@stowage/core/testing';
import { ipc, ipcCollect, ipcOf } from '@stowage/ipc';
import { RefCounterClient } from '@stowage/ipc/testing';
import { LmsController, lms, pin } from '@stowage/lms';
import { MemoryEventRecorder, toChromeTrace, toVizData } from '@stowage/cli';

const KiB = 1 << 10;
const MiB = 1 << 20;

describe('MemoryEventRecorder', () => {
  it("records LMS page-outs and page-ins among the allocator's events, at the address of the block freed and filled", async () => {
    await using rt = await createRuntime({ plugins: [cpu({ limit: 32 * MiB }), lms()] });
    const allocator = rt.allocator('cpu'); // LMS meets the device when its allocator is made
    const lmsDevice = resolve(rt.container, LmsController).device(parseDevice('cpu'))!;
    using recorder = new MemoryEventRecorder().attachAllocator(allocator).attachLms(lmsDevice.events);
    const s = rt.storage(10 * MiB);
    rt.write(s, new Uint8Array(10 * MiB).fill(3));
    pin(s).release();
    expect(resolve(rt.container, LmsController).reclaimInactive()).to.equal(10 * MiB);
    pin(s).release();
    const actions = recorder.events.map((e) => e.action);
    expect(actions).to.include.members(['segment_alloc', 'alloc', 'free_requested', 'page_out', 'page_in']);
    const out = recorder.events.find((e) => e.action === 'page_out')!;
    const freed = recorder.events.slice(0, recorder.events.indexOf(out)).filter((e) => e.action === 'free_requested').at(-1)!;
    expect(out.addr).to.equal(freed.addr);
    expect(out.size).to.equal(10 * MiB);
    const back = recorder.events.find((e) => e.action === 'page_in')!;
    const allocated = recorder.events.slice(0, recorder.events.indexOf(back)).filter((e) => e.action === 'alloc').at(-1)!;
    expect(back.addr).to.equal(allocated.addr);
    // The Chrome export and the page see them.
    const chrome = toChromeTrace(recorder.events, 'lms');
    expect(chrome.traceEvents.filter((e) => e.cat === 'lms').map((e) => e.name)).to.deep.equal(['page_out 10.00 MiB', 'page_in 10.00 MiB']);
    const data = toVizData(rt.allocator('cpu').snapshot(), { trace: recorder.events });
    expect(data.trace.actionNames).to.include.members(['page_out', 'page_in']);
    s.release();
  });

  it("records IPC's send, the producer's release into the limbo and its collection", async () => {
    await using rt = await createRuntime({ plugins: [ipc()] });
    const service = ipcOf(rt);
    using recorder = new MemoryEventRecorder().attachAllocator(rt.allocator('cpu')).attachIpc(service.events);
    const consumer = new RefCounterClient({ threadId: 77 }); // stands for a worker of this process
    try {
      const s = rt.storage(4096);
      const address = s.peekDataPtr().address;
      const slot = service.send(s);
      consumer.acquire(slot);
      s.release();
      consumer.release(slot);
      expect(ipcCollect(rt)).to.equal(4096);
      const ipcEvents = recorder.events.filter((e) => e.action.startsWith('ipc_'));
      expect(ipcEvents.map((e) => [e.action, e.addr, e.size])).to.deep.equal([
        ['ipc_send', address, 4096],
        ['ipc_limbo', address, 4096],
        ['ipc_collect', address, 4096],
      ]);
      const collect = recorder.events.findIndex((e) => e.action === 'ipc_collect');
      expect(recorder.events.slice(0, collect).some((e) => e.action === 'free_requested' && e.addr === address), 'the block is freed by the collection').to.equal(true);
    } finally {
      consumer.close();
    }
  });

  it('records a free that waits on work using the block as completed only when it completes, as the snapshot shows it', () => {
    const backend = new VirtualMemoryBackend({ storeData: false, streams: 2 });
    using engine = new CachingAllocator(backend, { preset: 'pytorch' });
    using recorder = new MemoryEventRecorder().attachAllocator(engine);
    const waits = engine.allocate(4 * KiB);
    engine.recordStream(waits, 1); // used on stream 1, whose work the test holds back
    backend.holdStream(1);
    engine.free(waits);
    const done = engine.allocate(8 * KiB);
    engine.free(done); // nothing else uses it: complete at once
    const actions = (): string[] => recorder.events.map((e) => `${e.action} ${e.addr === waits.address ? 'waits' : 'done'}`);
    expect(actions()).to.deep.equal(['segment_alloc waits', 'alloc waits', 'free_requested waits', 'alloc done', 'free_requested done', 'free_completed done']);
    const block = engine.snapshot().segments.flatMap((s) => s.blocks).find((b) => b.address === waits.address)!;
    expect(block.state, 'the snapshot agrees: not reusable yet').to.equal('active_pending_free');
    backend.completeStream(1);
    engine.emptyCache(); // the engine notices completed work when it next looks
    const completed = recorder.events.filter((e) => e.action === 'free_completed' && e.addr === waits.address);
    expect(completed.map((e) => e.size)).to.deep.equal([4 * KiB]);
    expect(completed[0]!.timeUs).to.be.at.least(recorder.events.find((e) => e.action === 'free_requested' && e.addr === waits.address)!.timeUs);
  });

  it('stops recording once disposed', async () => {
    await using rt = await createRuntime();
    const recorder = new MemoryEventRecorder().attachAllocator(rt.allocator('cpu'));
    rt.storage(64).release();
    const seen = recorder.events.length;
    recorder.dispose();
    rt.storage(64).release();
    expect(recorder.events.length).to.equal(seen);
    expect(seen).to.be.greaterThan(0);
  });
});
