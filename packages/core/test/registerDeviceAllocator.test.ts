import { expect } from 'chai';
import type { CachingAllocatorOptions, Plugin } from '@stowage/core';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec, MemoryReclaimer } from '@stowage/core/plugin-kit';
import { BackendUnavailableError, CachingAllocator, cpu, createCpuAllocator, createRuntime, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { createDeviceAllocator, IpcCollector, LmsReclaimer, registerDeviceAllocator, resolveDeviceOptions } from '@stowage/core/plugin-kit';
import { VirtualMemoryBackend } from '@stowage/core/testing';

const MiB = 1 << 20;

/** A plugin that registers fake IPC and LMS reclaimers, recording each call; `lms` frees what `held` holds. */
function fakeReclaimers(calls: string[], held: { release(): void; byteLength: number }[] = []): Plugin {
  const ipc: MemoryReclaimer = { reclaim: (device) => (calls.push(`ipc ${device.type}`), 0) };
  const lms: MemoryReclaimer = {
    reclaim: (device) => {
      calls.push(`lms ${device.type}`);
      return held.splice(0).reduce((n, p) => (p.release(), n + p.byteLength), 0);
    },
  };
  return {
    name: 'fake reclaimers',
    register: (c) => {
      c.register(IpcCollector, { useValue: ipc });
      c.register(LmsReclaimer, { useValue: lms });
    },
  };
}

function thrownBy(f: () => unknown): unknown {
  try {
    f();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('cpu plugin', () => {
  it('refuses a shared option that is not a boolean, an unknown key and a bad engine option when the plugin is made', () => {
    for (const [options, pattern] of [
      [{ shared: 'no' }, /options\.shared must be true or false; got "no"/],
      [{ limt: '1GiB' }, /options\.limt.*did you mean limit\?/],
      [{ sharde: true }, /did you mean shared\?/],
      [{ expandableSegments: 'yes' }, /options\.expandableSegments must be true or false/],
    ] as const) {
      for (const make of [() => cpu(options as never), () => createCpuAllocator(options as never)]) {
        const error = thrownBy(make);
        expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
        expect((error as Error).message).to.match(pattern);
      }
    }
  });

  it("runs the runtime's reclaimers (IPC, then LMS) past its limit before OutOfMemoryError", async () => {
    const calls: string[] = [];
    await using rt = await createRuntime({ plugins: [cpu({ limit: '4MiB', preset: 'pytorch' }), fakeReclaimers(calls)] });
    for (let i = 0; i < 4; i++) rt.storage(MiB); // two 2 MiB segments of the small pool: the budget
    expect(calls).to.deep.equal([]);
    expect(() => rt.storage(MiB)).to.throw(OutOfMemoryError, /budget is 4\.00 MiB/);
    expect(calls).to.deep.equal(['ipc cpu', 'lms cpu']);
  });

  it("refuses a reclaimers option: no option replaces the runtime's reclaimers", () => {
    const reclaimers = (): readonly MemoryReclaimer[] => [];
    const error = thrownBy(() => cpu({ limit: '4MiB', reclaimers } as CachingAllocatorOptions));
    expect(error, String(error)).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.match(/reclaimers/).and.match(/runtime's reclaimers/);
  });

  it('passes engine options it does not own through to the engine, garbageCollectionThreshold among them', async () => {
    await using rt = await createRuntime({ plugins: [cpu({ limit: '8MiB', garbageCollectionThreshold: 0.5, maxSplitSize: '32MiB' })] });
    const engine = rt.allocator('cpu') as CachingAllocator;
    expect(engine.options.garbageCollectionThreshold).to.equal(0.5);
    expect(engine.options.maxSplitSize).to.equal(32 * MiB);
    expect(engine.options.memoryLimit, 'limit is the engine budget').to.equal(8 * MiB);
  });

  it('answers a device index it does not serve with BackendUnavailableError naming the devices it has', async () => {
    await using rt = await createRuntime({ plugins: [cpu()] });
    const error = thrownBy(() => rt.storage(8, { device: 'cpu:1' }));
    expect(error, String(error)).to.be.instanceOf(BackendUnavailableError);
    expect((error as Error).message).to.equal('cpu:1 does not exist: this runtime has one cpu device, cpu:0. Use that one.');
  });

  it('rejects a bad engine option when the plugin is made, not on first use', () => {
    expect(() => cpu({ maxSplitSize: 5 })).to.throw(InvalidArgumentError, /maxSplitSize/);
    expect(() => cpu({ garbageCollectionThreshold: 0.5 }), 'a threshold is a fraction of the budget').to.throw(InvalidArgumentError, /options\.limit/);
    expect(() => cpu({ limit: 'lots' })).to.throw(InvalidArgumentError, /options\.limit/);
    expect(() => cpu({ limit: { fraction: 0.5 } }), 'the host reports no capacity').to.throw(InvalidArgumentError, /^options\.limit must be a byte count .*reports no capacity/);
    expect(() => createCpuAllocator({ limit: { fraction: 0.5 } })).to.throw(InvalidArgumentError, /reports no capacity/);
  });
});

describe('createCpuAllocator', () => {
  it("makes limit the engine's memoryLimit and leaves the backend's capacity unknown", () => {
    using allocator = createCpuAllocator({ limit: '8MiB' });
    expect(allocator.options.memoryLimit).to.equal(8 * MiB);
    expect(allocator.backend.capacityBytes, 'the host reports no capacity').to.equal(undefined);
    expect(allocator.capacityBytes, 'what the engine may reserve').to.equal(8 * MiB);
  });
});

interface ArenaOptions extends DeviceAllocatorOptions {
  readonly streams?: number;
}

/** A third-party device through the one path: two devices, a device option of its own. */
function arenaSpec(made: { options: CachingAllocatorOptions; streams: number | undefined }[]): DeviceAllocatorSpec<ArenaOptions, 'streams'> {
  return {
    deviceType: 'arena',
    deviceCount: 2,
    deviceOptions: ['streams'],
    create(device, engine, own) {
      made.push({ options: engine, streams: own.streams });
      const backend = new VirtualMemoryBackend({ storeData: false, device, ...(own.streams === undefined ? {} : { streams: own.streams }) });
      return new CachingAllocator(backend, engine);
    },
  };
}

describe('registerDeviceAllocator', () => {
  it('serves a third-party device: its own options stay with it, the rest go to the engine with the budget and the reclaimers', async () => {
    const made: { options: CachingAllocatorOptions; streams: number | undefined }[] = [];
    const calls: string[] = [];
    const arena: Plugin = { name: 'arena', register: (c) => registerDeviceAllocator(c, arenaSpec(made), { streams: 2, limit: '4MiB', preset: 'pytorch' }) };
    await using rt = await createRuntime({ plugins: [arena, fakeReclaimers(calls)] });
    for (let i = 0; i < 4; i++) rt.storage(MiB, { device: 'arena:1' });
    expect(made).to.have.length(1);
    expect(made[0]!.streams).to.equal(2);
    expect(made[0]!.options).to.not.have.property('streams');
    expect(made[0]!.options.memoryLimit).to.equal(4 * MiB);
    expect(() => rt.storage(MiB, { device: 'arena:1' })).to.throw(OutOfMemoryError, /budget is 4\.00 MiB/);
    expect(calls).to.deep.equal(['ipc arena', 'lms arena']);
    const error = thrownBy(() => rt.storage(8, { device: 'arena:2' }));
    expect(error, String(error)).to.be.instanceOf(BackendUnavailableError);
    expect((error as Error).message).to.equal('arena:2 does not exist: this runtime has 2 arena devices, arena:0 to arena:1. Use one of those.');
  });
});

describe('resolveDeviceOptions', () => {
  const spec = { deviceType: 'arena', deviceOptions: ['streams'] as const };

  it('takes no options as none, here and in createDeviceAllocator (a third-party device need not pass {})', () => {
    expect(resolveDeviceOptions<ArenaOptions, 'streams'>(spec, undefined)).to.deep.equal({ own: {}, engine: {}, budgetBytes: undefined });
    const made = createDeviceAllocator<ArenaOptions, 'streams', CachingAllocator<number>>({
      ...spec,
      deviceCount: 1,
      create: (_device, engine) => new CachingAllocator(new VirtualMemoryBackend(), engine),
    });
    expect(made.allocate(16).byteLength).to.equal(16);
    made.dispose();
  });

  it('splits the device options from the engine options and maps limit onto memoryLimit', () => {
    const settings = resolveDeviceOptions<ArenaOptions, 'streams'>(spec, { streams: 2, limit: '1GiB', garbageCollectionThreshold: 0.8 });
    expect(settings.own).to.deep.equal({ streams: 2 });
    expect(settings.engine).to.deep.equal({ memoryLimit: 2 ** 30, garbageCollectionThreshold: 0.8 });
    expect(settings.budgetBytes).to.equal(2 ** 30);
    expect(resolveDeviceOptions<ArenaOptions, 'streams'>(spec, { limit: { fraction: 0.5 } }).engine).to.deep.equal({ memoryLimit: { fraction: 0.5 } });
  });

  it('refuses memoryLimit, reclaimers, options that are not an object and limits that are not budgets', () => {
    const bad: [unknown, RegExp][] = [
      [{ memoryLimit: '1GiB' }, /options\.memoryLimit.*options\.limit/],
      [{ reclaimers: () => [] }, /options\.reclaimers/],
      [null, /options/],
      [{ limit: -1 }, /options\.limit/],
      [{ limit: { fraction: 2 } }, /options\.limit\.fraction/],
      [{ limt: '1GiB' }, /options\.limt.*did you mean limit\?/],
      [{ stream: 2 }, /options\.stream.*did you mean streams\?/],
      [{ unifiedPools: 'no' }, /options\.unifiedPools must be true or false/],
      [{ limit: { fracton: 0.5 } }, /options\.limit\.fracton.*did you mean fraction\?/],
    ];
    for (const [options, pattern] of bad) {
      const error = thrownBy(() => resolveDeviceOptions(spec, options as ArenaOptions));
      expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
  });
});
