import { expect } from 'chai';
import type { DependencyContainer } from 'tsyringe';
import type { Device, LmsStorage, Plugin, ReshapePolicy as ReshapePolicyType, StorageImpl, TensorImpl } from '@stowage/core';
import { Allocator, BackendUnavailableError, BlockInspector, CachingAllocator, IpcExporter, Pager, TrackingAllocator, cpu, DataPtr, createCpuAllocator, createRuntime, DisposedError, DisposeFailedError, ForeignPointerError, ForwardingAllocator, InvalidArgumentError, OutOfMemoryError, ReshapePolicy, Runtime, LimitingAllocator, StatisticsAllocator, UseAfterReleaseError, wrapAllocators } from '@stowage/core';
import { AllocatorContext, AllocatorFactory, StorageHooks } from '@stowage/core/plugin-kit';
import { storageHooks, thrownBy } from './engine/helpers.js';

describe('createRuntime', () => {
  it('gives a runtime with no plugins the CPU allocator', async () => {
    await using rt = await createRuntime();
    expect(rt.deviceTypes).to.deep.equal(['cpu']);
    expect(rt.allocator('cpu').device).to.deep.equal({ type: 'cpu', index: 0 });
    expect(rt.container.resolve(Allocator)).to.equal(rt.allocator());
    expect(rt.container.resolve(Runtime)).to.equal(rt);
  });

  it('keeps two runtimes in one process apart: containers, allocators and statistics', async () => {
    await using a = await createRuntime();
    await using b = await createRuntime();
    expect(a.container).to.not.equal(b.container);
    expect(a.allocator()).to.not.equal(b.allocator());
    a.storage(1000);
    expect(a.allocator().memoryStats()['requested_bytes.all.current']).to.equal(1000);
    expect(b.allocator().memoryStats()['requested_bytes.all.current']).to.equal(0);
    a.container.register(StorageHooks, { useValue: {} });
    expect(b.container.isRegistered(StorageHooks, true)).to.equal(false);
  });

  it('lets a later plugin override an earlier registration and core defaults', async () => {
    const policy: ReshapePolicyType = { name: 'always-copy', reshape: (t: TensorImpl, sizes) => t.clone().view(sizes) };
    const copying: Plugin = { name: 'copying', register: (c: DependencyContainer) => void c.register(ReshapePolicy, { useValue: policy }) };
    await using rt = await createRuntime({ plugins: [cpu({ limit: '64MiB' }), copying] });
    expect(rt.reshapePolicy.name).to.equal('always-copy');
    const t = rt.tensor([2, 3]);
    expect(t.reshape([6]).storage).to.not.equal(t.storage);
    expect(() => rt.storage(128 << 20)).to.throw(OutOfMemoryError);
  });

  it('awaits asynchronous plugin registration and serves the devices plugins add', async () => {
    const npu: Plugin = {
      name: 'npu',
      register: async (c) => {
        await Promise.resolve();
        c.register(AllocatorFactory, {
          useValue: { deviceType: 'npu', create: (device: Device) => Object.assign(createCpuAllocator(), { device }) },
        });
      },
    };
    await using rt = await createRuntime({ plugins: [npu] });
    expect(rt.deviceTypes).to.deep.equal(['cpu', 'npu']);
  });

  it('rejects a plugin that is not { name, register }', async () => {
    let error: unknown;
    await createRuntime({ plugins: [{ name: 'broken' } as Plugin] }).catch((e: unknown) => (error = e));
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.match(/^plugins\[0\] must be a plugin/);
  });

  it('runs registered storage hooks on every storage it makes', async () => {
    const writes: number[] = [];
    const plugin: Plugin = { name: 'spy', register: (c) => void c.register(StorageHooks, { useValue: { beforeWrite: (s: StorageImpl) => writes.push(s.byteLength) } }) };
    await using rt = await createRuntime({ plugins: [plugin] });
    rt.write(rt.storage(12), new Uint8Array(4));
    expect(writes).to.deep.equal([12]);
  });
});

describe('Runtime#storage and #tensor', () => {
  it('allocates storages on the named device, shared when asked', async () => {
    await using rt = await createRuntime();
    const s = rt.storage(64, { device: 'cpu:0', shared: true });
    expect(s.byteLength).to.equal(64);
    expect(s.data().handle).to.be.instanceOf(SharedArrayBuffer);
    const t = rt.tensor([2, 3], { dtype: 'int64', device: { type: 'cpu', index: 0 } });
    expect(t.storage.byteLength).to.equal(48);
  });

  it('rejects bad sizes and unknown devices with typed errors, allocating nothing', async () => {
    await using rt = await createRuntime();
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 53, '8']) expect(() => rt.storage(bad as number)).to.throw(InvalidArgumentError, /^nbytes/);
    expect(() => rt.storage(8, { device: 'webgpu' })).to.throw(BackendUnavailableError, /Add the plugin for 'webgpu'/);
    expect(() => rt.storage(8, { device: 'cpu:1' })).to.throw(BackendUnavailableError, /cpu:1 does not exist/);
    expect(() => rt.storage(8, { device: 'CPU' })).to.throw(InvalidArgumentError, /^options.device/);
    expect(() => rt.tensor([2, -1])).to.throw(InvalidArgumentError, /^sizes\[1\]/);
    expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
  });

  it('releases the LMS object when an afterCreate hook throws', async () => {
    let lmsReleased = 0;
    class LmsAllocator extends ForwardingAllocator {
      override asLmsStorage(): LmsStorage {
        return { state: 'allocated', pin() {}, unpin() {}, access() {}, ready: () => Promise.resolve(), release: () => void lmsReleased++ };
      }
    }
    await using rt = await createRuntime({
      plugins: [
        wrapAllocators('cpu', (a) => new LmsAllocator(a)),
        storageHooks({
          afterCreate: () => {
            throw new Error('afterCreate failed');
          },
        }),
      ],
    });
    expect(() => rt.storage(64)).to.throw(/afterCreate failed/);
    expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
    expect(lmsReleased, 'the LMS object of the storage that was never handed out').to.equal(1);
  });
});

describe('Runtime#write and #read', () => {
  it('round-trips bytes through a storage, at an offset', async () => {
    await using rt = await createRuntime();
    const s = rt.storage(8);
    rt.write(s, new Uint8Array(8));
    rt.write(s, new Uint8Array([1, 2, 3]), 4);
    rt.write(s, new Uint16Array([0x0201]));
    expect([...(await rt.read(s))]).to.deep.equal([1, 2, 0, 0, 1, 2, 3, 0]);
  });

  it('rejects writes that run past the storage and leaves its bytes alone', async () => {
    await using rt = await createRuntime();
    const s = rt.storage(4);
    rt.write(s, new Uint8Array([9, 9, 9, 9]));
    expect(() => rt.write(s, new Uint8Array(5))).to.throw(InvalidArgumentError, /storage's 4 bytes/);
    expect(() => rt.write(s, new Uint8Array(2), 3)).to.throw(InvalidArgumentError);
    expect(() => rt.write(s, [1, 2] as unknown as Uint8Array)).to.throw(InvalidArgumentError, /^bytes must be a Uint8Array/);
    expect(() => rt.write(s, new Uint8Array(1), -1)).to.throw(InvalidArgumentError, /^offset/);
    expect([...(await rt.read(s))]).to.deep.equal([9, 9, 9, 9]);
  });

  it('rejects released storages and storages of another runtime', async () => {
    await using rt = await createRuntime();
    await using other = await createRuntime();
    const released = rt.storage(4);
    released.release();
    expect(() => rt.write(released, new Uint8Array(1))).to.throw(UseAfterReleaseError);
    expect(() => rt.read(released)).to.throw(UseAfterReleaseError);
    const foreign = other.storage(4);
    expect(() => rt.write(foreign, new Uint8Array(1))).to.throw(ForeignPointerError);
    expect(() => rt.read(foreign)).to.throw(ForeignPointerError);
  });
});

describe('Runtime#dispose', () => {
  it('releases live storages, frees allocator memory and refuses later calls', async () => {
    const rt = await createRuntime();
    const allocator = rt.allocator();
    const s = rt.storage(100);
    rt.storage(200).release();
    await rt.dispose();
    await rt.dispose();
    expect(s.isReleased).to.equal(true);
    expect(() => rt.storage(8)).to.throw(DisposedError);
    expect(() => rt.allocator()).to.throw(DisposedError);
    expect(() => allocator.allocate(8)).to.throw(DisposedError);
  });

  it('disposes every allocator even when one allocator throws on dispose', async () => {
    const npu: Plugin = {
      name: 'npu',
      register: (c) =>
        void c.register(AllocatorFactory, {
          useValue: {
            deviceType: 'npu',
            create: (device: { type: string; index: number }) => {
              const a = createCpuAllocator();
              return new (class extends ForwardingAllocator {
                override get device() {
                  return device;
                }
                override dispose(): void {
                  super.dispose();
                  throw new Error('npu dispose failed');
                }
              })(a);
            },
          },
        }),
    };
    const rt = await createRuntime({ plugins: [npu] });
    rt.allocator('npu');
    const cpuAllocator = rt.allocator('cpu');
    await rt.dispose().catch(() => undefined);
    expect(() => cpuAllocator.allocate(8), 'the cpu allocator was left undisposed').to.throw(DisposedError);
  });
});

describe('Runtime#memorySummary', () => {
  it('lists each allocator with allocated, peak and reserved bytes', async () => {
    await using rt = await createRuntime();
    rt.storage(1536);
    const summary = rt.memorySummary();
    expect(summary.split('\n')[0]).to.match(/^device\s+allocated\s+peak allocated\s+reserved/);
    expect(summary).to.match(/cpu:0\s+1\.50 KiB\s+1\.50 KiB\s+2\.00 MiB\s+2\.00 MiB\s+1\s+1$/m);
  });
});

describe('wrapAllocators', () => {
  it('wraps the allocators of one device type in adaptors, later plugins outside earlier ones', async () => {
    await using rt = await createRuntime({
      plugins: [wrapAllocators('cpu', (a) => new LimitingAllocator(a, '64MiB')), wrapAllocators('cpu', (a) => new StatisticsAllocator(a))],
    });
    const allocator = rt.allocator('cpu');
    expect(allocator).to.be.instanceOf(StatisticsAllocator);
    expect((allocator as StatisticsAllocator).upstream).to.be.instanceOf(LimitingAllocator);
    rt.storage(1000);
    expect((allocator as StatisticsAllocator).counters().bytes.current).to.equal(1000);
    expect(() => rt.storage(65 << 20)).to.throw(OutOfMemoryError);
    expect(rt.allocator('cpu')).to.equal(allocator);
  });
});

describe('Runtime#dispose with a failing hook', () => {
  it('still frees every allocator and reports the failure', async () => {
    const plugin: Plugin = {
      name: 'faulty',
      register: (c) =>
        void c.register(StorageHooks, {
          useValue: {
            beforeRelease: () => {
              throw new Error('hook bug');
            },
          },
        }),
    };
    const rt = await createRuntime({ plugins: [plugin] });
    const allocator = rt.allocator();
    rt.storage(100);
    let error: unknown;
    await rt.dispose().catch((e: unknown) => (error = e));
    expect(error).to.be.instanceOf(DisposeFailedError);
    expect((error as DisposeFailedError).code).to.equal('DISPOSE_FAILED');
    expect((error as DisposeFailedError).errors.map((e) => (e as Error).message)).to.deep.equal(['hook bug']);
    expect((error as Error).message).to.match(/Releasing 1 storage\(s\) failed .* The first: hook bug/);
    expect(() => allocator.allocate(8)).to.throw(DisposedError);
  });
});

describe('Runtime#adopt', () => {
  it("adopts its own allocator's pointers and pointers with a deleter of their own, and refuses another runtime's", async () => {
    await using a = await createRuntime();
    await using b = await createRuntime();
    const own = b.adopt(b.allocator().allocate(16));
    expect(own.byteLength).to.equal(16);
    const foreign = new DataPtr({ device: { type: 'cpu', index: 0 }, byteLength: 8, handle: new ArrayBuffer(8), byteOffset: 0, address: 0, context: null, deleter: () => {} });
    expect(b.adopt(foreign).byteLength, 'a pointer no allocator made is the caller to vouch for').to.equal(8);
    const theirs = a.allocator().allocate(32);
    expect(() => b.adopt(theirs)).to.throw(ForeignPointerError);
    expect(a.adopt(theirs).byteLength, 'its own runtime still adopts it').to.equal(32);
  });

  it('refuses a pointer allocated by another runtime', async () => {
    await using a = await createRuntime();
    await using b = await createRuntime();
    const ptr: DataPtr = a.allocator().allocate(64);
    expect(() => b.adopt(ptr)).to.throw(/another runtime|did not allocate|foreign/i);
  });
});

/** The error a promise rejected with, or undefined. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('createRuntime (what it is handed)', () => {
  const bad: { name: string; options: unknown; argument: string }[] = [
    { name: 'null options', options: null, argument: 'options' },
    { name: "a device name instead of options ('cpu')", options: 'cpu', argument: 'options' },
    { name: 'a parent that is not a container', options: { parent: {} }, argument: 'options.parent' },
    { name: 'a misspelled option', options: { plugin: [] }, argument: 'options.plugin' },
    { name: 'a plugin without a name', options: { plugins: [{ register() {} }] }, argument: 'plugins[0].name' },
    { name: 'a plugin with an empty name', options: { plugins: [{ name: '', register() {} }] }, argument: 'plugins[0].name' },
    { name: 'null as a plugin', options: { plugins: [null] }, argument: 'plugins[0]' },
  ];
  for (const { name, options, argument } of bad) {
    it(`refuses ${name} with InvalidArgumentError naming ${argument}`, async () => {
      const error = await rejectionOf(createRuntime(options as Parameters<typeof createRuntime>[0]));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
    });
  }

  it('refuses a plugin that registers null as the reshape policy, naming the policy', async () => {
    const plugin: Plugin = { name: 'nullPolicy', register: (c) => void c.register(ReshapePolicy, { useValue: null as unknown as ReshapePolicyType }) };
    const error = await rejectionOf(createRuntime({ plugins: [plugin] }));
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.match(/^the registered ReshapePolicy must be/);
  });

  it('refuses a reshape policy without reshape, naming the policy', async () => {
    const plugin: Plugin = { name: 'noReshape', register: (c) => void c.register(ReshapePolicy, { useValue: { name: 'half' } as unknown as ReshapePolicyType }) };
    const error = await rejectionOf(createRuntime({ plugins: [plugin] }));
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.match(/ReshapePolicy must be an object with name and reshape/);
  });
});

describe('Runtime#storage and Runtime#tensor (options)', () => {
  const storageOptions: { name: string; options: unknown; argument: string }[] = [
    { name: 'null options', options: null, argument: 'options' },
    { name: "device: null (not 'cpu')", options: { device: null }, argument: 'options.device' },
    { name: "resizable: 'no'", options: { resizable: 'no' }, argument: 'options.resizable' },
    { name: 'shared: 1', options: { shared: 1 }, argument: 'options.shared' },
    { name: 'a misspelled key (resizeable)', options: { resizeable: true }, argument: 'options.resizeable' },
    { name: 'an array', options: [], argument: 'options' },
  ];
  for (const { name, options, argument } of storageOptions) {
    it(`storage() refuses ${name} with InvalidArgumentError naming ${argument}, allocating nothing`, async () => {
      await using rt = await createRuntime();
      const error = thrownBy(() => rt.storage(8, options as object));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
      expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
    });
  }

  const tensorOptions: { name: string; options: unknown; argument: string }[] = [
    { name: 'null options', options: null, argument: 'options' },
    { name: 'a misspelled key (dtyp)', options: { dtyp: 'int32' }, argument: 'options.dtyp' },
    { name: "shared: 'yes'", options: { shared: 'yes' }, argument: 'options.shared' },
    { name: 'dtype: null (not float32)', options: { dtype: null }, argument: 'options.dtype' },
    { name: "device: null (not 'cpu')", options: { device: null }, argument: 'options.device' },
  ];
  for (const { name, options, argument } of tensorOptions) {
    it(`tensor() refuses ${name} with InvalidArgumentError naming ${argument}, allocating nothing`, async () => {
      await using rt = await createRuntime();
      const error = thrownBy(() => rt.tensor([2], options as object));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
      expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
    });
  }

  it('suggests the nearest known option for a misspelled key', async () => {
    await using rt = await createRuntime();
    expect(() => rt.tensor([2], { dtyp: 'int32' } as object)).to.throw(InvalidArgumentError, /did you mean dtype\?/);
  });
});

describe('Runtime#adopt and Allocator#free (one owner per pointer)', () => {
  it('refuses to adopt a pointer twice: one storage owns it', async () => {
    await using rt = await createRuntime();
    const ptr = rt.allocator().allocate(8);
    const first = rt.adopt(ptr);
    expect(() => rt.adopt(ptr)).to.throw(InvalidArgumentError, /adopted already/);
    first.release();
    expect(ptr.isReleased).to.equal(true);
    expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
  });

  it("refuses allocator.free(storage.data()) on a live storage, changing nothing", async () => {
    await using rt = await createRuntime();
    const storage = rt.storage(8);
    expect(() => rt.allocator().free(storage.data())).to.throw(InvalidArgumentError, /belongs to a live storage/);
    expect(storage.data().isReleased).to.equal(false);
    expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(1);
    storage.release();
    expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
  });

  it('refuses a free through an adaptor of a pointer a live storage holds', async () => {
    await using rt = await createRuntime({ plugins: [wrapAllocators('cpu', (a) => new StatisticsAllocator(a))] });
    const storage = rt.storage(8);
    expect(() => rt.allocator().free(storage.data())).to.throw(InvalidArgumentError, /belongs to a live storage/);
    expect(storage.data().isReleased).to.equal(false);
  });
});

describe('createRuntime (what plugins register)', () => {
  const registrations: { name: string; register: (c: DependencyContainer) => void; message: RegExp }[] = [
    { name: 'container.register(ReshapePolicy, null)', register: (c) => void c.register(ReshapePolicy, null as never), message: /^plugins\[0\] must be a plugin whose register\(container\) succeeds; the plugin "p" threw/ },
    { name: 'an AllocatorFactory registered as { useValue: null }', register: (c) => void c.register(AllocatorFactory, { useValue: null as never }), message: /^the registered AllocatorFactory must be/ },
    { name: 'a plugin whose register throws a TypeError', register: () => void (null as unknown as { x: number }).x, message: /^plugins\[0\] must be a plugin whose register\(container\) succeeds/ },
  ];
  for (const { name, register, message } of registrations) {
    it(`refuses ${name} with InvalidArgumentError naming it`, async () => {
      const error = await rejectionOf(createRuntime({ plugins: [{ name: 'p', register }] }));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(message);
    });
  }

  it('passes a typed error a plugin throws through unchanged', async () => {
    const thrown = new BackendUnavailableError('no device');
    const error = await rejectionOf(createRuntime({ plugins: [{ name: 'p', register: () => { throw thrown; } }] }));
    expect(error).to.equal(thrown);
  });
});

describe('Runtime#service', () => {
  it("finds the engine's services of a device through any adaptor, and nothing under a token the device does not offer", async () => {
    await using rt = await createRuntime({ plugins: [wrapAllocators('cpu', (a) => new TrackingAllocator(a))] });
    const s = rt.storage(1000);
    const inspector = rt.service(BlockInspector, 'cpu')!;
    expect(inspector).to.be.instanceOf(CachingAllocator);
    expect(inspector.describeBlock(s.data())?.size, "the block, found under the TrackingAllocator's deleter").to.equal(1024);
    expect(rt.service(Pager)?.device).to.deep.equal({ type: 'cpu', index: 0 });
    expect(rt.service(IpcExporter, 'cpu'), 'the CPU device exports nothing for IPC').to.equal(undefined);
  });

  it('gives each runtime its own services, and none for a device no plugin serves', async () => {
    await using a = await createRuntime();
    await using b = await createRuntime();
    expect(a.service(Pager)).to.not.equal(b.service(Pager));
    expect(() => a.service(Pager, 'webgpu')).to.throw(BackendUnavailableError);
  });

  it('refuses a second service under one token for one device, and registers nothing for a device whose factory failed', async () => {
    const token = Symbol('test.service');
    let attempts = 0;
    const twice: Plugin = {
      name: 'twice',
      register: (c: DependencyContainer) =>
        void c.register(AllocatorFactory, {
          useValue: {
            deviceType: 'twice',
            create(device: Device, context: AllocatorContext) {
              attempts++;
              context.provide(device, token, 'first');
              context.provide(device, token, 'second');
              return createCpuAllocator();
            },
          },
        }),
    };
    await using rt = await createRuntime({ plugins: [twice] });
    expect(() => rt.service(token, 'twice')).to.throw(InvalidArgumentError, /registered already/);
    expect(() => rt.service(token, 'twice'), 'the failed attempt left no service behind').to.throw(InvalidArgumentError, /registered already/);
    expect(attempts).to.equal(2);
  });
});
