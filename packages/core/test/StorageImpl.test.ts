import { expect } from 'chai';
import type { LmsStorage } from '@stowage/core';
import type { StorageHooks } from '@stowage/core/plugin-kit';
import { createCpuAllocator, createRuntime, DeviceMismatchError, ForwardingAllocator, InvalidArgumentError, isStowageError, StorageImpl, UseAfterReleaseError, wrapAllocators } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { engine, storageHooks } from './engine/helpers.js';

describe('StorageImpl#data and #mutableData', () => {
  it('runs read hooks on data() and write hooks on mutableData(), in registration order', () => {
    using allocator = createCpuAllocator();
    const calls: string[] = [];
    const hooks: StorageHooks[] = [
      { beforeRead: () => calls.push('a.read'), beforeWrite: () => calls.push('a.write') },
      { beforeWrite: () => calls.push('b.write'), beforeRelease: () => calls.push('b.release') },
    ];
    const storage = new StorageImpl({ dataPtr: allocator.allocate(16), allocator, hooks });
    storage.data();
    storage.mutableData();
    storage.release();
    expect(calls).to.deep.equal(['a.read', 'a.write', 'b.write', 'b.release']);
  });

  it('throws UseAfterReleaseError on every access once released, and releases idempotently', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(16), allocator });
    storage.release();
    storage.release();
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
    expect(() => storage.data()).to.throw(UseAfterReleaseError, /released/);
    expect(() => storage.mutableData()).to.throw(UseAfterReleaseError);
    expect(() => storage.setDataPtr(allocator.allocate(16))).to.throw(UseAfterReleaseError);
  });
});

describe('StorageImpl#setDataPtr', () => {
  it('swaps in a pointer of the same size and hands back the old one', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(16), allocator });
    const next = allocator.allocate(16);
    const old = storage.setDataPtr(next);
    expect(storage.data()).to.equal(next);
    old.release();
    expect(() => storage.setDataPtr(allocator.allocate(8))).to.throw(InvalidArgumentError, /16 bytes/);
  });

  it('changes nothing when given the pointer the storage already holds', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(16), allocator });
    const ptr = storage.peekDataPtr();
    expect(storage.setDataPtr(ptr)).to.equal(ptr);
    expect(storage.data()).to.equal(ptr);
    storage.release();
    expect(ptr.isReleased).to.equal(true);
  });
});

describe('StorageImpl#resize', () => {
  it('keeps the common prefix of a resizable storage and frees the old data', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(4), allocator, resizable: true });
    hostBytes(storage.mutableData()).set([1, 2, 3, 4]);
    storage.resize(6);
    expect([...hostBytes(storage.data())]).to.deep.equal([1, 2, 3, 4, 0, 0]);
    storage.resize(2);
    expect([...hostBytes(storage.data())]).to.deep.equal([1, 2]);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(1);
  });

  it('refuses to resize a storage that is not resizable, changing nothing', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(4), allocator });
    expect(() => storage.resize(8)).to.throw(InvalidArgumentError, /resizable/);
    expect(() => new StorageImpl({ dataPtr: allocator.allocate(4), allocator, resizable: true }).resize(-1)).to.throw(InvalidArgumentError, /nbytes/);
    expect(storage.byteLength).to.equal(4);
  });

  it('keeps a shared (SharedArrayBuffer-backed) storage shared after a resize', async () => {
    await using rt = await createRuntime();
    const s = rt.storage(16, { shared: true, resizable: true });
    expect(s.data().handle).to.be.instanceOf(SharedArrayBuffer);
    s.resize(32);
    expect(s.data().handle, 'the storage was made with { shared: true }').to.be.instanceOf(SharedArrayBuffer);
  });

  it('rejects a bad size or a non-resizable storage without running the write path', () => {
    const { allocator } = engine();
    let writes = 0;
    const storage = new StorageImpl({ dataPtr: allocator.allocate(64), allocator, hooks: [{ beforeWrite: () => void writes++ }] });
    expect(() => storage.resize(128)).to.throw(InvalidArgumentError);
    expect(() => storage.resize(-1)).to.throw(InvalidArgumentError);
    expect(writes, 'a rejected resize must not materialize (COW) or move generations').to.equal(0);
  });
});

describe('StorageImpl#release', () => {
  it("frees the memory and reports the error when the LMS object's release throws, so nothing stays held", () => {
    using allocator = createCpuAllocator();
    const failingLms: LmsStorage = { state: 'allocated', pin() {}, unpin() {}, access() {}, ready: () => Promise.resolve(), release: () => { throw new Error('lms release failed'); } };
    const lmsAllocator = new (class extends ForwardingAllocator {
      override asLmsStorage(): LmsStorage {
        return failingLms;
      }
    })(allocator, { ownsUpstream: false });
    const ptr = lmsAllocator.allocate(64);
    const storage = new StorageImpl({ dataPtr: ptr, allocator: lmsAllocator });
    expect(() => storage.release()).to.throw(/lms release failed/);
    expect([storage.isReleased, ptr.isReleased], 'storage and pointer both released').to.deep.equal([true, true]);
    expect(allocator.memoryStats()['allocated_bytes.all.current'], 'the memory went back').to.equal(0);
  });

  it('leaves no storage live after dispose when a beforeRelease hook throws, and runs that hook once', async () => {
    let calls = 0;
    const rt = await createRuntime({
      plugins: [
        storageHooks({
          beforeRelease: () => {
            calls++;
            throw new Error('hook failed');
          },
        }),
      ],
    });
    const s = rt.storage(64);
    expect(() => s.release()).to.throw(/hook failed/);
    await rt.dispose().then(
      () => undefined,
      () => undefined,
    );
    expect(() => s.data(), 'the storage outlives its disposed runtime and hands out freed memory').to.throw(UseAfterReleaseError);
    expect(calls, 'beforeRelease runs again for the same storage on every retry').to.equal(1);
  });

  it('refuses to release a storage whose LMS object is active (pinned), leaving it intact', async () => {
    let lmsReleased = 0;
    const lms = { state: 'active' as LmsStorage['state'], pin() {}, unpin() {}, access() {}, ready: () => Promise.resolve(), release: () => void lmsReleased++ };
    class LmsAllocator extends ForwardingAllocator {
      override asLmsStorage(): LmsStorage {
        return lms;
      }
    }
    await using rt = await createRuntime({ plugins: [wrapAllocators('cpu', (a) => new LmsAllocator(a))] });
    const s = rt.storage(64);
    let error: unknown;
    try {
      s.release();
    } catch (e) {
      error = e;
    }
    lms.state = 'inactive'; // let the runtime's dispose release it
    expect(lmsReleased, 'LmsStorage.release() is documented never to be called while pinned').to.equal(0);
    expect(s.isReleased).to.equal(false);
    expect(isStowageError(error), 'a typed error').to.equal(true);
  });
});

describe('StorageImpl constructor', () => {
  it('asks the allocator for an LMS object once, and releases it with the storage', () => {
    const events: string[] = [];
    class LmsAllocator extends ForwardingAllocator {
      override asLmsStorage(): LmsStorage {
        events.push('asLmsStorage');
        return { state: 'allocated', pin: () => {}, unpin: () => {}, access: () => {}, ready: () => Promise.resolve(), release: () => void events.push('lms.release') };
      }
    }
    using allocator = new LmsAllocator(createCpuAllocator());
    const storage = new StorageImpl({ dataPtr: allocator.allocate(8), allocator });
    expect(storage.lms?.state).to.equal('allocated');
    storage.release();
    expect(events).to.deep.equal(['asLmsStorage', 'lms.release']);
  });

  it('has no LMS object when the allocator does not offer one', () => {
    using allocator = createCpuAllocator();
    expect(new StorageImpl({ dataPtr: allocator.allocate(8), allocator }).lms).to.equal(null);
  });

  it('rejects a pointer from another device than its allocator', () => {
    using allocator = createCpuAllocator();
    const other = { ...allocator, device: { type: 'cuda', index: 0 } } as unknown as typeof allocator;
    expect(() => new StorageImpl({ dataPtr: allocator.allocate(8), allocator: other })).to.throw(DeviceMismatchError);
  });
});

describe('StorageImpl#sibling (the pointers it takes)', () => {
  it('refuses a released pointer with UseAfterReleaseError', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(8), allocator });
    const released = allocator.allocate(8);
    released.release();
    expect(() => storage.sibling(released)).to.throw(UseAfterReleaseError);
  });

  it('refuses a pointer another live storage holds, and a non-pointer', () => {
    using allocator = createCpuAllocator();
    const storage = new StorageImpl({ dataPtr: allocator.allocate(8), allocator });
    const other = new StorageImpl({ dataPtr: allocator.allocate(8), allocator });
    expect(() => storage.sibling(other.data())).to.throw(InvalidArgumentError, /no live storage holds/);
    expect(() => storage.sibling(null as never)).to.throw(InvalidArgumentError, /^dataPtr must be a DataPtr/);
  });
});

describe('StorageImpl constructor (what it is handed)', () => {
  it('refuses a released pointer, a pointer a live storage holds, and a missing init with typed errors', () => {
    using allocator = createCpuAllocator();
    const released = allocator.allocate(8);
    released.release();
    expect(() => new StorageImpl({ dataPtr: released, allocator })).to.throw(UseAfterReleaseError);
    const held = new StorageImpl({ dataPtr: allocator.allocate(8), allocator });
    expect(() => new StorageImpl({ dataPtr: held.data(), allocator })).to.throw(InvalidArgumentError, /no live storage holds/);
    expect(() => new StorageImpl(null as never)).to.throw(InvalidArgumentError, /^init must be/);
    expect(() => new StorageImpl({ dataPtr: allocator.allocate(8), allocator, resizable: 'no' as never })).to.throw(InvalidArgumentError, /^init.resizable/);
  });

  it('lets go of the pointer when a hook refuses the storage, so the caller can wrap it again', () => {
    using allocator = createCpuAllocator();
    const dataPtr = allocator.allocate(8);
    const refuse: StorageHooks = {
      afterCreate: () => {
        throw new Error('no');
      },
    };
    expect(() => new StorageImpl({ dataPtr, allocator, hooks: [refuse] })).to.throw('no');
    expect(new StorageImpl({ dataPtr, allocator }).data()).to.equal(dataPtr);
  });
});

describe('StorageImpl#resize under a tensor', () => {
  it('shrinks below a live tensor, which then refuses data access until the storage grows again', async () => {
    await using rt = await createRuntime();
    const storage = rt.storage(16, { resizable: true });
    const tensor = rt.tensor([1]).withStorage(storage, { sizes: [4] });
    storage.resize(8);
    expect(() => tensor.data()).to.throw(InvalidArgumentError, /resized below the tensor's extent/);
    expect(() => tensor.mutableData()).to.throw(InvalidArgumentError, /resized below the tensor's extent/);
    storage.resize(16);
    expect(tensor.data().byteLength).to.equal(16);
  });
});
