import { expect } from 'chai';
import { cpu, createRuntime, InvalidArgumentError } from '@stowage/core';
import { collectSharedCow, cow, receiveCow, shareCow } from '@stowage/cow';

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

  it('refuses a value that is not a runtime with InvalidArgumentError', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ shared: true })] });
    expect(() => collectSharedCow({} as never)).to.throw(InvalidArgumentError, /Runtime/);
    expect(() => shareCow(null as never, rt.storage(8, { shared: true }))).to.throw(InvalidArgumentError, /Runtime/);
  });
});
