import { expect } from 'chai';
import { BackendUnavailableError, CachingAllocator, createRuntime, DataPtr, DeviceError, InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { describeAllocatorContract, VirtualMemoryBackend } from '@stowage/core/testing';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { AllocatorConfError, createCudaAllocator, cuda, CudaError } from '@stowage/allocator-cuda';
import { CudaResult } from '@stowage/allocator-cuda/driver';
import type { TestLibcuda } from '@stowage/allocator-cuda/testing';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

const MiB = 2 ** 20;
const GiB = 2 ** 30;

const library = testLibcuda();

/** Skips a test that needs the stand-in's hooks (an injected fault, a delayed stream) on a real driver. */
function needHooks(ctx: Mocha.Context, lib: TestLibcuda): NonNullable<TestLibcuda['hooks']> {
  if (lib.hooks === null) {
    console.log('    skipped: needs the stand-in libcuda\'s test hooks; running on a real driver');
    ctx.skip();
  }
  return lib.hooks!;
}

function filled(byteLength: number, value: number): Uint8Array {
  return new Uint8Array(byteLength).fill(value);
}

describe('CudaAllocator', function () {
  this.timeout(120_000);
  if (typeof library === 'string') {
    it('runs on a libcuda (skipped: none could be loaded or built)', function () {
      console.log(`    skipped: ${library}`);
      this.skip();
    });
    return;
  }
  const lib = library;
  const make = (options: Parameters<typeof createCudaAllocator>[0] = {}): CudaAllocator => createCudaAllocator({ libcuda: lib.path, ...options });

  afterEach(() => {
    lib.hooks?.clearInjectedError();
    lib.hooks?.setCapacity(GiB);
  });

  describeAllocatorContract('CudaAllocator (fixed segments)', () => make({ expandableSegments: false }));
  describeAllocatorContract('CudaAllocator (expandable segments)', () => make());

  describe('expandable segments', () => {
    it('grows one segment by mapping granularity-sized pages, and unmaps them on emptyCache, the memory going back to the device', () => {
      using allocator = make();
      const mapping = allocator.backend.pageMapping!;
      expect(mapping.pageBytes).to.equal(allocator.backend.driver.memGetAllocationGranularity(allocator.backend.cuDevice));
      const free0 = allocator.backend.memoryInfo().freeBytes;
      const a = allocator.allocate(5 * MiB);
      const b = allocator.allocate(3 * MiB);
      const snapshot = allocator.snapshot();
      expect(snapshot.segments.length, 'one segment for both').to.equal(1);
      expect(snapshot.segments[0]!.is_expandable).to.equal(true);
      const reserved = allocator.memoryStats()['reserved_bytes.all.current'];
      expect(reserved % mapping.pageBytes).to.equal(0);
      expect(reserved).to.be.at.least(8 * MiB);
      expect(free0 - allocator.backend.memoryInfo().freeBytes, 'mapped pages are what the device lost').to.equal(reserved);
      expect(b.address - a.address, 'b follows a in the same range').to.equal(5 * MiB);
      allocator.writeBytes(b, filled(3 * MiB, 9));
      allocator.free(a);
      allocator.free(b);
      allocator.emptyCache();
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
      expect(allocator.backend.memoryInfo().freeBytes).to.equal(free0);
    });

    it('maps each growth as one physical allocation of whole pages, 20 MiB in the large pool, in three driver calls', () => {
      using allocator = make();
      const driver = allocator.backend.driver;
      const calls = driver.callCount;
      const ptr = allocator.allocate(30 * MiB);
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(40 * MiB);
      // cuCtxSetCurrent + cuMemAddressReserve, then cuCtxSetCurrent, cuMemCreate, cuMemMap and cuMemSetAccess
      expect(driver.callCount - calls).to.equal(2 + 1 + 3);
      allocator.free(ptr);
      const small = allocator.allocate(4096);
      expect(allocator.memoryStats()['reserved_bytes.small_pool.current'], 'a 2 MiB page in the small pool').to.equal(2 * MiB);
      allocator.free(small);
      allocator.emptyCache();
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
    });

    it("maps PyTorch's pages one physical allocation each in the pytorch preset, and pages of segmentPageBytes rounded to the granularity", () => {
      using allocator = make({ preset: 'pytorch', expandableSegments: true });
      const driver = allocator.backend.driver;
      const calls = driver.callCount;
      const ptr = allocator.allocate(30 * MiB);
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(40 * MiB);
      // cuCtxSetCurrent + cuMemAddressReserve, then cuCtxSetCurrent, per page cuMemCreate and cuMemMap, one cuMemSetAccess
      expect(driver.callCount - calls).to.equal(2 + 1 + 2 * 2 + 1);
      allocator.free(ptr);
      using sized = make({ segmentPageBytes: '15MiB' });
      const one = sized.allocate(MiB);
      expect(sized.memoryStats()['reserved_bytes.all.current'], '15 MiB rounds up to 16 MiB').to.equal(16 * MiB);
      sized.free(one);
      expect(() => cuda({ segmentPageBytes: 'big' })).to.throw(InvalidArgumentError, /options\.segmentPageBytes/);
      expect(() => cuda({ segmentPageBytes: { small: '2MiB', larg: '20MiB' } as never })).to.throw(InvalidArgumentError, /options\.segmentPageBytes\.larg/);
    });

    it('gives back every page when the device runs out partway through growing a segment, and reports OutOfMemoryError', function () {
      const hooks = needHooks(this, lib);
      hooks.setCapacity(16 * MiB);
      using allocator = make({ segmentPageBytes: '2MiB', pageRuns: false });
      const held = allocator.allocate(10 * MiB);
      expect(() => allocator.allocate(10 * MiB)).to.throw(OutOfMemoryError);
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(10 * MiB);
      expect(allocator.backend.memoryInfo().freeBytes, 'no page of the failed growth stays mapped').to.equal(6 * MiB);
      allocator.engine.assertInvariants();
      const small = allocator.allocate(4 * MiB);
      allocator.free(small);
      allocator.free(held);
    });

    it('unmaps a run of pages only whole: emptyCache gives back the runs that are all free and keeps the one a live block is in', function () {
      using allocator = make({ segmentPageBytes: '2MiB' });
      const free0 = allocator.backend.memoryInfo().freeBytes;
      const a = allocator.allocate(6 * MiB); // run [0, 6)
      const b = allocator.allocate(6 * MiB); // run [6, 12)
      const c = allocator.allocate(4 * MiB); // run [12, 16)
      allocator.free(a);
      allocator.free(c);
      const d = allocator.allocate(2 * MiB); // the start of a's run
      allocator.emptyCache();
      expect(allocator.memoryStats()['reserved_bytes.all.current'], "a's run (d lives in it) and b's run stay").to.equal(12 * MiB);
      expect(free0 - allocator.backend.memoryInfo().freeBytes).to.equal(12 * MiB);
      allocator.engine.assertInvariants();
      allocator.free(b);
      allocator.free(d);
      allocator.emptyCache();
      expect(allocator.backend.memoryInfo().freeBytes).to.equal(free0);
    });

    it('turns a driver error while mapping into a CudaError, leaking no page', function () {
      const hooks = needHooks(this, lib);
      using allocator = make({ segmentPageBytes: '2MiB', pageRuns: false });
      const free0 = allocator.backend.memoryInfo().freeBytes;
      hooks.injectError('cuMemMap', CudaResult.UNKNOWN, 1); // the second page of the growth
      expect(() => allocator.allocate(6 * MiB)).to.throw(CudaError, /cuMemMap/);
      expect(allocator.backend.memoryInfo().freeBytes).to.equal(free0);
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.equal(0);
      allocator.engine.assertInvariants();
      const ok = allocator.allocate(6 * MiB);
      allocator.free(ok);
    });
  });

  describe('streams', () => {
    /**
     * A reader on a non-blocking stream B is held back 100 ms, then copies `src` into `dst`. Meanwhile `src` is
     * freed on the default stream and the same size allocated and overwritten. Returns what B read.
     */
    async function readWhileFreed(allocator: CudaAllocator, hooks: NonNullable<TestLibcuda['hooks']>, recordStream: boolean): Promise<{ read: Uint8Array; reused: boolean }> {
      const src = allocator.allocate(MiB);
      allocator.writeBytes(src, filled(MiB, 0xaa));
      const dst = allocator.allocate(MiB);
      const b = allocator.createStream({ nonBlocking: true });
      const stream = allocator.streamOf(b);
      hooks.delayStream(stream!, 100_000);
      allocator.backend.driver.memcpyDtoDAsync(allocator.devicePointer(dst), allocator.devicePointer(src), MiB, stream);
      if (recordStream) allocator.recordStream(src, b);
      const srcAddress = src.address;
      allocator.free(src);
      const next = allocator.allocate(MiB);
      allocator.writeBytes(next, filled(MiB, 0xbb));
      allocator.backend.driver.streamSynchronize(stream);
      return { read: await allocator.readBytes(dst), reused: next.address === srcAddress };
    }

    it('does not reuse a block freed while another stream reads it until that stream passes the free (recordStream)', async function () {
      const hooks = needHooks(this, lib);
      using allocator = make({ expandableSegments: false });
      const { read, reused } = await readWhileFreed(allocator, hooks, true);
      expect(reused, 'the freed block was handed out again before the reader finished').to.equal(false);
      expect(read.every((b) => b === 0xaa), 'the reader saw the bytes it was reading when the block was freed').to.equal(true);
    });

    it('shows the wrong answer when the other stream is not recorded: the block is reused and the reader sees the new owner\'s bytes', async function () {
      const hooks = needHooks(this, lib);
      using allocator = make({ expandableSegments: false });
      const { read, reused } = await readWhileFreed(allocator, hooks, false);
      expect(reused).to.equal(true);
      expect(read.every((b) => b === 0xbb), 'the reader saw the new owner\'s bytes').to.equal(true);
    });

    it('returns the block once the reader\'s event completes', async function () {
      const hooks = needHooks(this, lib);
      using allocator = make({ expandableSegments: false });
      const src = allocator.allocate(MiB);
      const b = allocator.createStream({ nonBlocking: true });
      hooks.delayStream(allocator.streamOf(b)!, 50_000);
      allocator.recordStream(src, b);
      const address = src.address;
      allocator.free(src);
      expect(allocator.memoryStats()['active_bytes.all.current'], 'pending free still active').to.be.greaterThan(0);
      allocator.backend.driver.streamSynchronize(allocator.streamOf(b));
      const again = allocator.allocate(MiB);
      expect(again.address).to.equal(address);
      expect(allocator.memoryStats()['active_bytes.all.current']).to.equal(again.byteLength >= MiB ? allocator.memoryStats()['active_bytes.all.current'] : -1);
    });

    it('refuses createStream options that are not { nonBlocking: boolean } with InvalidArgumentError, creating nothing', () => {
      using allocator = make({ expandableSegments: false });
      expect(() => allocator.createStream({ nonBlocking: 'yes' } as unknown as { nonBlocking: boolean })).to.throw(InvalidArgumentError, /options\.nonBlocking/);
      expect(() => allocator.createStream({ nonblocking: true } as object)).to.throw(InvalidArgumentError, /nonBlocking/);
      expect(() => allocator.createStream(null as unknown as object)).to.throw(InvalidArgumentError);
    });

    it('allocates on a created stream from that stream\'s own pool', () => {
      using allocator = make({ expandableSegments: false });
      const s = allocator.createStream();
      const a = allocator.allocate(MiB, { stream: s });
      allocator.free(a);
      const onDefault = allocator.allocate(MiB);
      expect(onDefault.address, 'a block cached for stream s is not handed to the default stream').to.not.equal(a.address);
      const onS = allocator.allocate(MiB, { stream: s });
      expect(onS.address).to.equal(a.address);
    });
  });

  describe('CudaAllocator#allocate', () => {
    /** Allocates and frees every request once (the cache fills), then `rounds` more times; driver calls in those rounds. */
    function callsOnCacheHits(allocator: CudaAllocator, requests: readonly { bytes: number; stream: number }[], rounds: number): number {
      const round = (): void => {
        for (const { bytes, stream } of requests) allocator.free(allocator.allocate(bytes, { stream }));
      };
      round();
      const reserved = allocator.memoryStats()['reserved_bytes.all.current'];
      const driver = allocator.backend.driver;
      const calls = driver.callCount;
      for (let i = 0; i < rounds; i++) round();
      const made = driver.callCount - calls;
      expect(allocator.memoryStats()['reserved_bytes.all.current'], 'every request was served from the cache').to.equal(reserved);
      return made;
    }

    it('makes no driver call for an allocate and free served from the cache, fixed segments, small and large, on two streams', () => {
      using allocator = make({ expandableSegments: false });
      const s = allocator.createStream();
      const requests = [1000, 3 * MiB, 30 * MiB].flatMap((bytes) => [{ bytes, stream: 0 }, { bytes, stream: s }]);
      expect(callsOnCacheHits(allocator, requests, 100)).to.equal(0);
    });

    it('makes no driver call for an allocate and free served from the cache of an expandable segment', () => {
      using allocator = make();
      const requests = [1000, 3 * MiB, 30 * MiB, 700].map((bytes) => ({ bytes, stream: 0 }));
      expect(callsOnCacheHits(allocator, requests, 100)).to.equal(0);
    });
  });

  describe('CudaAllocator#dispose', () => {
    it('leaves no driver event alive when disposed with a free still pending on another stream\'s event', function () {
      const hooks = needHooks(this, lib);
      const before = hooks.liveEvents();
      const allocator = make({ expandableSegments: false });
      const reader = allocator.createStream({ nonBlocking: true });
      const own = allocator.createStream();
      const ptr = allocator.allocate(MiB, { stream: own });
      hooks.delayStream(allocator.streamOf(reader)!, 50_000); // the reader's work runs past the dispose below
      allocator.recordStream(ptr, reader);
      allocator.free(ptr);
      expect(allocator.memoryStats()['active_bytes.all.current'], 'the free waits for the reader\'s event').to.be.greaterThan(0);
      expect(hooks.liveEvents(), 'an event was recorded for the pending free').to.be.greaterThan(before);
      allocator.dispose();
      expect(hooks.liveEvents()).to.equal(before);
    });

    it('leaves no driver event alive once disposed after frees whose events completed and went back to the pool', function () {
      const hooks = needHooks(this, lib);
      const before = hooks.liveEvents();
      const allocator = make({ expandableSegments: false });
      const reader = allocator.createStream({ nonBlocking: true });
      for (let i = 0; i < 3; i++) {
        const ptr = allocator.allocate(MiB);
        allocator.recordStream(ptr, reader);
        allocator.free(ptr);
      }
      allocator.backend.driver.streamSynchronize(allocator.streamOf(reader));
      allocator.free(allocator.allocate(MiB)); // completes the pending frees: their events go back to the pool
      allocator.dispose();
      expect(hooks.liveEvents()).to.equal(before);
    });
  });

  describe('snapshots', () => {
    /** The JSON types of an object's keys, as PyTorch's memory visualizer reads them. */
    function shape(value: object): Record<string, string> {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v]));
    }

    it('has the structure of the engine\'s snapshot (PyTorch\'s, checked against a recorded pickle in core), with device addresses and the configuration string', () => {
      using allocator = make({ allocConf: 'max_split_size_mb:64' });
      allocator.engine.recordHistory();
      const a = allocator.allocate(3 * MiB);
      const b = allocator.allocate(1000);
      allocator.free(a);
      const ours = JSON.parse(JSON.stringify(allocator.snapshot())) as Record<string, unknown> & { segments: Record<string, unknown>[]; allocator_settings: Record<string, unknown> };
      using reference = new CachingAllocator(new VirtualMemoryBackend({ storeData: false }), { maxSplitSize: 64 * MiB });
      reference.recordHistory();
      reference.free(reference.allocate(3 * MiB));
      reference.allocate(1000);
      const theirs = JSON.parse(JSON.stringify(reference.snapshot())) as typeof ours;
      expect(Object.keys(ours).sort()).to.deep.equal(Object.keys(theirs).sort());
      expect(shape(ours.segments[0]!)).to.deep.equal(shape(theirs.segments[0]!));
      expect(shape((ours.segments[0]!.blocks as object[])[0]!)).to.deep.equal(shape((theirs.segments[0]!.blocks as object[])[0]!));
      expect(b.address, 'a pointer\'s address is its device address').to.equal(Number(allocator.devicePointer(b)));
      expect(ours.segments.some((s) => (s.address as number) <= b.address && b.address < (s.address as number) + (s.total_size as number))).to.equal(true);
      expect(ours.allocator_settings['PYTORCH_CUDA_ALLOC_CONF']).to.equal('max_split_size_mb:64');
      expect(ours.allocator_settings['max_split_size']).to.equal(64 * MiB);
      allocator.free(b);
    });
  });

  describe('bad input and faults', () => {
    it('refuses an unknown stream number and a stream of another allocator\'s table, naming the device', () => {
      using allocator = make();
      expect(() => allocator.allocate(16, { stream: 99 })).to.throw(InvalidArgumentError, /stream/);
      expect(() => allocator.streamOf(99)).to.throw(InvalidArgumentError, /names no stream/);
      const ptr = allocator.allocate(16);
      expect(() => allocator.recordStream(ptr, 99)).to.throw(InvalidArgumentError);
      allocator.free(ptr);
    });

    it('turns a driver error mid-allocation into a CudaError, leaks nothing, and serves the next allocation', function () {
      const hooks = needHooks(this, lib);
      using allocator = make({ expandableSegments: false });
      const before = allocator.memoryStats();
      hooks.injectError('cuMemAlloc_v2', CudaResult.UNKNOWN);
      let thrown: unknown;
      try {
        allocator.allocate(4 * MiB);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).to.be.instanceOf(CudaError);
      expect(thrown).to.be.instanceOf(DeviceError);
      expect((thrown as CudaError).driverName).to.equal('CUDA_ERROR_UNKNOWN');
      expect((thrown as CudaError).code).to.equal('DEVICE_ERROR');
      const after = allocator.memoryStats();
      expect(after['reserved_bytes.all.current']).to.equal(before['reserved_bytes.all.current']);
      expect(after['allocated_bytes.all.current']).to.equal(before['allocated_bytes.all.current']);
      allocator.engine.assertInvariants();
      const ptr = allocator.allocate(4 * MiB);
      expect(ptr.byteLength).to.equal(4 * MiB);
      allocator.free(ptr);
    });

    it('reports the driver\'s out-of-memory as OutOfMemoryError with the device\'s total and free memory and what it holds, after freeing its cache', function () {
      const hooks = needHooks(this, lib);
      hooks.setCapacity(64 * MiB);
      using allocator = make({ expandableSegments: false });
      const held = allocator.allocate(40 * MiB);
      const cached = allocator.allocate(20 * MiB);
      allocator.free(cached);
      let thrown: unknown;
      try {
        allocator.allocate(30 * MiB);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).to.be.instanceOf(OutOfMemoryError);
      const message = (thrown as Error).message;
      expect(message).to.match(/tried to allocate 30\.00 MiB/);
      expect(message).to.match(/64\.00 MiB total capacity, of which \S+ MiB is free \(as its driver reports/);
      expect(message).to.match(/40\.00 MiB is allocated/);
      expect(allocator.memoryStats()['num_ooms']).to.equal(1);
      expect(allocator.memoryStats()['reserved_bytes.all.current'], 'the cached 20 MiB segment was released first').to.equal(40 * MiB);
      allocator.free(held);
      const ok = allocator.allocate(30 * MiB);
      allocator.free(ok);
    });
  });

  describe('the cuda() plugin', () => {
    it('serves cuda:0 in a runtime, under a fraction of the device\'s memory', async () => {
      await using rt = await createRuntime({ plugins: [cuda({ libcuda: lib.path, limit: { fraction: 0.5 } })] });
      const storage = rt.storage(1024, { device: 'cuda:0' });
      rt.write(storage, filled(1024, 7));
      expect((await rt.read(storage)).every((b) => b === 7)).to.equal(true);
      expect(storage.data()).to.be.instanceOf(DataPtr);
      const allocator = rt.allocator('cuda:0') as CudaAllocator;
      const capacity = allocator.backend.capacityBytes;
      expect(allocator.memoryStats()['reserved_bytes.all.current']).to.be.greaterThan(0);
      expect(() => allocator.allocate(Math.floor(capacity * 0.6))).to.throw(OutOfMemoryError, /budget/);
      storage.release();
    });

    it('serves two devices from one runtime, each allocation on its own device, under its own context', async function () {
      await using rt = await createRuntime({ plugins: [cuda({ libcuda: lib.path, expandableSegments: false })] });
      const a0 = rt.allocator('cuda:0') as CudaAllocator;
      let a1: CudaAllocator;
      try {
        a1 = rt.allocator('cuda:1') as CudaAllocator;
      } catch (error) {
        if (!(error instanceof BackendUnavailableError)) throw error;
        console.log('    skipped: the driver has one device');
        return this.skip();
      }
      const free0 = a0.backend.memoryInfo().freeBytes;
      const free1 = a1.backend.memoryInfo().freeBytes;
      const driver = a0.backend.driver;
      const calls = driver.callCount;
      // Each over 10 MiB: a segment of its own, one cuMemAlloc_v2 each.
      const p0 = a0.allocate(12 * MiB);
      const p1 = a1.allocate(14 * MiB);
      const q0 = a0.allocate(16 * MiB);
      expect(driver.callCount - calls, 'three cuMemAlloc_v2, each after its device\'s cuCtxSetCurrent').to.equal(6);
      const r0 = a0.allocate(18 * MiB);
      expect(free0 - a0.backend.memoryInfo().freeBytes).to.equal(a0.memoryStats()['reserved_bytes.all.current']);
      expect(free1 - a1.backend.memoryInfo().freeBytes).to.equal(a1.memoryStats()['reserved_bytes.all.current']);
      const s1 = a1.createStream();
      expect(() => a0.allocate(16, { stream: s1 })).to.throw(InvalidArgumentError, /stream/);
      expect(() => a0.streamOf(s1)).to.throw(InvalidArgumentError, /is a stream of cuda:1/);
      for (const p of [p0, q0, r0]) a0.free(p);
      a1.free(p1);
    });

    it('refuses a device index the driver does not have, saying which exist', async () => {
      await using rt = await createRuntime({ plugins: [cuda({ libcuda: lib.path })] });
      expect(() => rt.allocator('cuda:7')).to.throw(BackendUnavailableError, /cuda:7 does not exist/);
    });

    it('composes a runtime without a libcuda, and says what it looked for on first use of a CUDA device', async () => {
      await using rt = await createRuntime({ plugins: [cuda({ libcuda: ['/nonexistent/libcuda.so.1', '/also/missing/libcuda.so'] })] });
      let thrown: unknown;
      try {
        rt.allocator('cuda:0');
      } catch (error) {
        thrown = error;
      }
      expect(thrown).to.be.instanceOf(BackendUnavailableError);
      expect((thrown as Error).message).to.match(/\/nonexistent\/libcuda\.so\.1/).and.match(/\/also\/missing\/libcuda\.so/);
    });

    it('takes PyTorch\'s configuration string, under explicit options, and shows it in snapshots', () => {
      const conf = 'expandable_segments:False,max_split_size_mb:64,roundup_power2_divisions:4';
      using allocator = make({ allocConf: conf });
      expect(allocator.engine.options.maxSplitSize).to.equal(64 * MiB);
      expect(allocator.engine.options.expandableSegments).to.equal(false);
      expect(allocator.engine.options.roundupPower2Divisions[3]).to.equal(4);
      expect(allocator.snapshot().allocator_settings['PYTORCH_CUDA_ALLOC_CONF']).to.equal(conf);
      using overridden = make({ allocConf: conf, maxSplitSize: '128MiB' });
      expect(overridden.engine.options.maxSplitSize, 'an explicit option wins over the string').to.equal(128 * MiB);
    });

    it('refuses a configuration string with an unknown key or a bad value at once, with PyTorch\'s message', () => {
      expect(() => cuda({ allocConf: 'max_split_size:64' })).to.throw(AllocatorConfError, "Unrecognized key 'max_split_size' in CUDA allocator config. Did you mean 'max_split_size_mb'?");
      expect(() => cuda({ allocConf: 'max_split_size_mb:8' })).to.throw(AllocatorConfError, 'CachingAllocator option max_split_size_mb too small, must be >= 20');
      expect(() => createCudaAllocator({ libcuda: lib.path, allocConf: 'expandable_segments:Maybe' })).to.throw(AllocatorConfError);
    });

    it('refuses a bad libcuda option at once', () => {
      expect(() => cuda({ libcuda: [] })).to.throw(InvalidArgumentError, /options\.libcuda/);
    });
  });
});
