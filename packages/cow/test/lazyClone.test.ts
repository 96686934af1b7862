import { expect } from 'chai';
import type { Allocator, DataPtr, Runtime, StorageImpl } from '@stowage/core';
import { createRuntime, ForeignPointerError, ForwardingAllocator, InvalidArgumentError, UseAfterReleaseError, wrapAllocators } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { cow, isCowDataPtr, lazyClone, materialize, receiveCow, shareCow } from '@stowage/cow';

/** Counts copies made through the allocator (materialization copies with copyData). */
class CopyCounter extends ForwardingAllocator {
  copies = 0;
  override copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset?: number, srcOffset?: number): void {
    this.copies++;
    super.copyData(dst, src, nbytes, dstOffset, srcOffset);
  }
}

async function runtime(): Promise<{ rt: Runtime; counter: () => CopyCounter }> {
  const rt = await createRuntime({ plugins: [wrapAllocators('cpu', (a: Allocator) => new CopyCounter(a)), cow()] });
  return { rt, counter: () => rt.allocator('cpu') as CopyCounter };
}

function fill(rt: Runtime, s: StorageImpl, values: number[]): void {
  rt.write(s, new Uint8Array(values));
}

async function bytes(rt: Runtime, s: StorageImpl): Promise<number[]> {
  return [...(await rt.read(s))];
}

describe('lazyClone', () => {
  it('turns the original COW in place on the first clone and returns another storage over the same data', async () => {
    const { rt, counter } = await runtime();
    await using _ = rt;
    const a = rt.storage(4);
    fill(rt, a, [1, 2, 3, 4]);
    const ptr = a.peekDataPtr();
    const b = lazyClone(a)!;
    expect(b).to.not.equal(a);
    expect(a.peekDataPtr(), 'the same DataPtr object, converted in place').to.equal(ptr);
    expect(isCowDataPtr(a.peekDataPtr())).to.equal(true);
    expect(isCowDataPtr(b.peekDataPtr())).to.equal(true);
    expect(b.peekDataPtr().handle).to.equal(ptr.handle);
    expect(b.peekDataPtr().byteOffset).to.equal(ptr.byteOffset);
    expect(await bytes(rt, b)).to.deep.equal([1, 2, 3, 4]);
    expect(counter().copies).to.equal(0);
  });

  it('costs no allocation and no copy whatever the size', async () => {
    const { rt, counter } = await runtime();
    await using _ = rt;
    const big = rt.storage(64 << 20);
    const before = rt.allocator().memoryStats()['allocation.all.current'];
    for (let i = 0; i < 100; i++) lazyClone(big);
    expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(before);
    expect(counter().copies).to.equal(0);
  });

  it('refuses (returns null) for a pointer its allocator does not own, leaving it untouched', async () => {
    const { rt } = await runtime();
    await using _ = rt;
    const mine = rt.allocator().allocate(8);
    const imported = rt.adopt(
      new (mine.constructor as typeof DataPtr)({ ...mine, context: null, deleter: null, device: mine.device }),
    );
    expect(lazyClone(imported)).to.equal(null);
    expect(isCowDataPtr(imported.peekDataPtr())).to.equal(false);
    rt.allocator().free(mine);
  });

  it('never materializes on reads, including reads of both sides together', async () => {
    const { rt, counter } = await runtime();
    await using _ = rt;
    const a = rt.storage(4);
    fill(rt, a, [5, 6, 7, 8]);
    const b = lazyClone(a)!;
    const both = await Promise.all([rt.read(a), rt.read(b)]);
    a.data();
    b.data();
    hostBytes(b.data());
    expect(both.map((x) => [...x])).to.deep.equal([[5, 6, 7, 8], [5, 6, 7, 8]]);
    expect(isCowDataPtr(a.peekDataPtr()) && isCowDataPtr(b.peekDataPtr())).to.equal(true);
    expect(counter().copies).to.equal(0);
  });

  it('copies for the first writer and lets the last reference keep the data without a copy, in either order', async () => {
    for (const order of [['a', 'b'], ['b', 'a']] as const) {
      const { rt, counter } = await runtime();
      const a = rt.storage(4);
      fill(rt, a, [1, 1, 1, 1]);
      const storages = { a, b: lazyClone(a)! };
      const [first, second] = order.map((k) => storages[k]);
      rt.write(first!, new Uint8Array([2]));
      expect(counter().copies, `${order.join(' then ')}: the first write copies`).to.equal(1);
      expect(isCowDataPtr(first!.peekDataPtr())).to.equal(false);
      expect(materialize(second!)).to.equal('stolen');
      expect(counter().copies, 'the last reference steals').to.equal(1);
      rt.write(second!, new Uint8Array([3]), 1);
      expect(await bytes(rt, first!)).to.deep.equal([2, 1, 1, 1]);
      expect(await bytes(rt, second!)).to.deep.equal([1, 3, 1, 1]);
      await rt.dispose();
    }
  });

  it('clones a clone: three storages over one allocation, materialized one by one', async () => {
    const { rt, counter } = await runtime();
    await using _ = rt;
    const a = rt.storage(2);
    fill(rt, a, [9, 9]);
    const b = lazyClone(a)!;
    const c = lazyClone(b)!;
    expect(materialize(b)).to.equal('copied');
    expect(materialize(a)).to.equal('copied');
    expect(materialize(c)).to.equal('stolen');
    expect(materialize(c), 'materializing a storage that is no longer COW does nothing').to.equal('none');
    expect(counter().copies).to.equal(2);
    for (const s of [a, b, c]) expect(await bytes(rt, s)).to.deep.equal([9, 9]);
  });

  it('frees the shared data exactly once, when the last reference goes, written or not', async () => {
    const { rt } = await runtime();
    await using _ = rt;
    const stats = () => rt.allocator().memoryStats()['allocation.all.current'];
    const a = rt.storage(16);
    const b = lazyClone(a)!;
    const c = lazyClone(a)!;
    b.release();
    expect(stats()).to.equal(1);
    a.release();
    expect(stats()).to.equal(1);
    rt.write(c, new Uint8Array([1]));
    expect(stats(), 'the last reference kept the data: no copy, no new allocation').to.equal(1);
    c.release();
    expect(stats()).to.equal(0);
  });

  it('reads one side unchanged after the other wrote', async () => {
    const { rt } = await runtime();
    await using _ = rt;
    const t = rt.tensor([2, 2], { dtype: 'uint8' });
    fill(rt, t.storage, [1, 2, 3, 4]);
    const copy = lazyClone(t.storage)!;
    rt.write(t.storage, new Uint8Array([7, 7, 7, 7]));
    expect(await bytes(rt, copy)).to.deep.equal([1, 2, 3, 4]);
    expect(await bytes(rt, t.storage)).to.deep.equal([7, 7, 7, 7]);
  });

  it('rejects a released storage and resizes a COW storage by materializing it first', async () => {
    const { rt, counter } = await runtime();
    await using _ = rt;
    const gone = rt.storage(4);
    gone.release();
    expect(() => lazyClone(gone)).to.throw(UseAfterReleaseError);
    const a = rt.storage(4, { resizable: true });
    fill(rt, a, [1, 2, 3, 4]);
    const b = lazyClone(a)!;
    a.resize(6);
    expect(counter().copies, 'resize writes: the COW data is copied before the resize copies it again').to.equal(2);
    expect((await bytes(rt, a)).slice(0, 4)).to.deep.equal([1, 2, 3, 4]);
    expect(await bytes(rt, b)).to.deep.equal([1, 2, 3, 4]);
  });

  it('refuses to share across threads a storage that is not host shared memory', async () => {
    const { rt } = await runtime();
    await using _ = rt;
    expect(() => shareCow(rt, rt.storage(8))).to.throw(InvalidArgumentError, /SharedArrayBuffer-backed/);
    expect(() => receiveCow(rt, { data: new ArrayBuffer(8) } as never)).to.throw(InvalidArgumentError, /shareCow/);
    expect(() => lazyClone({} as StorageImpl)).to.throw(InvalidArgumentError, /StorageImpl/);
  });

  it('refuses a direct free of a COW pointer: it is released through its storage', async () => {
    const { rt } = await runtime();
    await using _ = rt;
    const a = rt.storage(4);
    lazyClone(a);
    expect(() => rt.allocator().free(a.peekDataPtr())).to.throw(ForeignPointerError);
  });
});

describe('lazyClone with views', () => {
  it('shares the storage between a lazily cloned tensor and its views, and a write through a view materializes the family once', async () => {
    const { rt, counter } = await runtime();
    await using _ = rt;
    const base = rt.tensor([4], { dtype: 'uint8' });
    fill(rt, base.storage, [1, 2, 3, 4]);
    const clone = base.withStorage(lazyClone(base.storage)!, { sizes: [4] });
    const view = clone.view([2, 2]);
    const other = clone.asStrided([2], [1], 2);
    expect(view.storage).to.equal(clone.storage);
    expect(counter().copies, 'views do not materialize').to.equal(0);
    rt.write(view.storage, new Uint8Array([9]), 1);
    expect(counter().copies).to.equal(1);
    rt.write(other.storage, new Uint8Array([8]), 2);
    expect(counter().copies, 'the family shares the materialized storage').to.equal(1);
    expect(await bytes(rt, clone.storage)).to.deep.equal([1, 9, 8, 4]);
    expect(await bytes(rt, base.storage)).to.deep.equal([1, 2, 3, 4]);
  });

  it("lazily clones a view's base storage: the view of the original is unaffected by writes to the clone", async () => {
    const { rt } = await runtime();
    await using _ = rt;
    const base = rt.tensor([6], { dtype: 'uint8' });
    fill(rt, base.storage, [0, 1, 2, 3, 4, 5]);
    const view = base.asStrided([3], [2], 0);
    const clone = lazyClone(view.storage)!;
    rt.write(clone, new Uint8Array([50]));
    expect([...hostBytes(view.storage.data())]).to.deep.equal([0, 1, 2, 3, 4, 5]);
  });
});
