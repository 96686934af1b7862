import { expect } from 'chai';
import fc from 'fast-check';
import type { DataPtr, Runtime } from '@stowage/core';
import { createRuntime } from '@stowage/core';
import { assertAllocatorInvariants, expectTypedOrSuccess, junk, junkArgs } from '@stowage/core/testing';
import type { AllocatorConf, CudaAllocator } from '@stowage/allocator-cuda';
import { createCudaAllocator, cuda, formatAllocatorConf, parseAllocatorConf, readAllocatorConfFromEnv } from '@stowage/allocator-cuda';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

// Note [The public API under junk] (core's test/publicApi.property.test.ts), for allocator-cuda's entry points on
// the stand-in libcuda (or a real one): cuda() and createCudaAllocator options, the CudaAllocator's members (the
// Allocator contract but owns, which is core's ForwardingAllocator's; streams, device pointers, IPC export, its
// pager, the engine's trim; not recordHistory, core's engine's: core's own tests feed those two junk), and the
// configuration string's functions. Each call, fed junk with the allocator's own pointers and streams mixed in,
// succeeds or throws a StowageError with a code, never another error; afterwards the allocator's statistics equal
// a recount of the pointers the test holds, the engine's invariants hold, and it still allocates.

const MiB = 2 ** 20;
const RUNS = { numRuns: 100 };
const library = testLibcuda();

/** Mostly one of `values` (right, or nearly so), sometimes junk: most calls get past their first check. */
const mostly = (values: unknown[]): fc.Arbitrary<unknown> => fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...values) }, { weight: 1, arbitrary: junk() });

describe("allocator-cuda's public API under junk", function () {
  this.timeout(120_000);
  if (typeof library === 'string') {
    it('runs on a libcuda (skipped: none could be loaded or built)', function () {
      console.log(`    skipped: ${library}`);
      this.skip();
    });
    return;
  }
  const lib = library;
  afterEach(() => {
    lib.hooks?.clearInjectedError();
  });

  /** An option's value: mostly right, sometimes wrong, sometimes junk. */
  const option = (right: unknown[], wrong: unknown[]): fc.Arbitrary<unknown> =>
    fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...right) }, { weight: 1, arbitrary: fc.constantFrom(...wrong) }, { weight: 1, arbitrary: junk() });
  const cudaOptions = fc.record(
    {
      allocConf: option(['expandable_segments:True', 'expandable_segments:False,max_split_size_mb:64', ''], ['nope:1', 5, 'max_split_size_mb:1']),
      shareableSegments: option([true, false], ['yes']),
      segmentPageBytes: option(['2MiB', 4 * MiB], ['3MiB', 1, 0]),
      limit: option(['256MiB', { fraction: 0.5 }], [{ fraction: 2 }, -1, '1KiB']),
      maxSplitSize: option(['64MiB'], [-1]),
      libcuda: option([lib.path, [lib.path]], [[], '', '/no/such/libcuda.so']),
    },
    { requiredKeys: [] },
  );
  /** Options with the test's libcuda unless they name another: the plugin then finds the driver. */
  const withLibrary = (o: unknown): unknown => (o !== null && typeof o === 'object' && !Array.isArray(o) && !('libcuda' in o) ? { ...o, libcuda: lib.path } : o);

  it('createCudaAllocator gives a typed error or an allocator that allocates and disposes', async () => {
    let allocated = 0;
    await fc.assert(
      fc.asyncProperty(fc.oneof({ weight: 3, arbitrary: cudaOptions }, { weight: 1, arbitrary: junk() }), option([0], [1, -1, 0.5, 99]), async (o, index) => {
        const made = await expectTypedOrSuccess('createCudaAllocator', () => createCudaAllocator(withLibrary(o) as never, index as number));
        if (made === undefined) return;
        const allocator = made as CudaAllocator;
        try {
          const ptr = await expectTypedOrSuccess('CudaAllocator#allocate', () => allocator.allocate(MiB));
          if (ptr !== undefined) {
            allocated++;
            allocator.free(ptr as DataPtr);
          }
          assertAllocatorInvariants(allocator, []);
        } finally {
          allocator.dispose();
        }
      }),
      { numRuns: 50 },
    );
    expect(allocated, 'allocators made that allocated').to.be.at.least(5);
  });

  it('cuda() gives a typed error or a plugin, and a runtime made with it allocates on cuda:0', async () => {
    let allocated = 0;
    await fc.assert(
      fc.asyncProperty(fc.oneof({ weight: 3, arbitrary: cudaOptions }, { weight: 1, arbitrary: junk() }), async (o) => {
        const plugin = await expectTypedOrSuccess('cuda', () => cuda(withLibrary(o) as never));
        if (plugin === undefined) return;
        const rt = (await expectTypedOrSuccess('createRuntime with cuda()', () => createRuntime({ plugins: [plugin as never] }))) as Runtime | undefined;
        if (rt === undefined) return;
        try {
          const storage = await expectTypedOrSuccess('Runtime#storage on cuda:0', () => rt.storage(4096, { device: 'cuda:0' }));
          if (storage !== undefined) {
            allocated++;
            (storage as { release(): void }).release();
          }
        } finally {
          await rt.dispose();
        }
      }),
      { numRuns: 50 },
    );
    expect(allocated, 'runtimes that allocated on cuda:0').to.be.at.least(5);
  });

  describe('CudaAllocator', () => {
    let allocator: CudaAllocator;
    let other: CudaAllocator;
    before(() => {
      allocator = createCudaAllocator({ libcuda: lib.path, limit: '256MiB' });
      other = createCudaAllocator({ libcuda: lib.path, limit: '64MiB' });
    });
    after(() => {
      allocator.dispose();
      other.dispose();
    });

    type Call = (x: CudaAllocator, a: unknown[]) => unknown;
    const calls: [string, number, Call][] = [
      ['allocate', 2, (x, a) => x.allocate(a[0] as number, a[1] as object)],
      ['free', 1, (x, a) => x.free(a[0] as DataPtr)],
      ['recordStream', 2, (x, a) => x.recordStream(a[0] as DataPtr, a[1] as number)],
      ['copyData', 5, (x, a) => x.copyData(a[0] as DataPtr, a[1] as DataPtr, a[2] as number, a[3] as number, a[4] as number)],
      ['writeBytes', 3, (x, a) => x.writeBytes(a[0] as DataPtr, a[1] as Uint8Array, a[2] as number)],
      ['readBytes', 3, (x, a) => x.readBytes(a[0] as DataPtr, a[1] as number, a[2] as number)],
      ['emptyCache', 1, (x, a) => (x.emptyCache as (...y: unknown[]) => void)(...a)],
      ['resetPeakStats', 1, (x, a) => (x.resetPeakStats as (...y: unknown[]) => void)(...a)],
      ['snapshot', 1, (x, a) => (x.snapshot as (...y: unknown[]) => unknown)(...a)],
      ['createStream', 1, (x, a) => x.createStream(a[0] as object)],
      ['adoptStream', 1, (x, a) => x.adoptStream(a[0] as never)],
      ['destroyStream', 1, (x, a) => x.destroyStream(a[0] as number)],
      ['streamOf', 1, (x, a) => x.streamOf(a[0] as number)],
      ['devicePointer', 1, (x, a) => x.devicePointer(a[0] as DataPtr)],
      ['exportIpc', 1, (x, a) => x.exportIpc(a[0] as DataPtr)],
      ['openIpc', 1, (x, a) => x.openIpc(a[0] as never)],
      ['engine.trim', 1, (x, a) => x.engine.trim(a[0] as number)],
      ['pager.pageOut', 1, (x, a) => x.pager.pageOut(a[0] as DataPtr)],
      ['pager.pageIn', 2, (x, a) => x.pager.pageIn(a[0] as Uint8Array, a[1] as DataPtr)],
    ];
    for (const [name, arity, call] of calls) {
      it(`CudaAllocator#${name} gives a typed error or succeeds, and leaves the allocator consistent`, async () => {
        const held = allocator.allocate(MiB);
        const small = allocator.allocate(512);
        const freed = allocator.allocate(64);
        allocator.free(freed);
        const stream = allocator.createStream();
        const foreign = other.allocate(256);
        const plausible = [held, small, freed, foreign, stream, 0, 7, allocator.streamOf(stream), 512, 64, new Uint8Array(16), { stream }, { nonBlocking: true }, { nonBlocking: 'yes' }, MiB];
        const live = (): DataPtr[] => [held, small].filter((p) => !p.isReleased);
        try {
          await fc.assert(
            fc.asyncProperty(junkArgs(arity, plausible), async (a) => {
              const made = await expectTypedOrSuccess(`CudaAllocator#${name}`, () => call(allocator, a));
              // Undo what a call made: a pointer, a stream, an opened or paged-out copy.
              if (name === 'allocate' && made !== undefined) allocator.free(made as DataPtr);
              if ((name === 'createStream' || name === 'adoptStream') && made !== undefined) allocator.destroyStream(made as number);
              if (name === 'openIpc' && made !== undefined) (made as DataPtr).release();
              if (name === 'exportIpc' && made !== undefined) for (const fd of ((made as { fds?: number[] }).fds ?? [])) (await import('node:fs')).closeSync(fd);
              if (name === 'pager.pageOut' && made !== undefined && made !== null) await (made as { done: Promise<unknown> }).done.catch(() => undefined);
              allocator.engine.assertInvariants();
              assertAllocatorInvariants(allocator, live());
              const probe = allocator.allocate(4096);
              assertAllocatorInvariants(allocator, [...live(), probe]);
              allocator.free(probe);
            }),
            RUNS,
          );
        } finally {
          for (const p of live()) allocator.free(p);
          other.free(foreign);
          if (allocator.backend.isStream(stream)) allocator.destroyStream(stream);
          allocator.backend.synchronize();
          allocator.emptyCache();
        }
      });
    }
  });

  describe('the configuration string', () => {
    const text = fc.oneof(
      fc.constantFrom('expandable_segments:True', 'max_split_size_mb:128,garbage_collection_threshold:0.6', 'roundup_power2_divisions:[256:1,512:2,>:4]', 'backend:native', 'nope:1', 'max_split_size_mb:', ':', ',', '[', 'roundup_power2_divisions:[1:', ''),
      fc.string({ maxLength: 40 }),
      junk(),
    );

    it('parseAllocatorConf gives an AllocatorConfError or InvalidArgumentError, or a conf that formats and parses back to itself', async () => {
      await fc.assert(
        fc.asyncProperty(text, async (t) => {
          const conf = (await expectTypedOrSuccess('parseAllocatorConf', () => parseAllocatorConf(t as string))) as AllocatorConf | undefined;
          if (conf === undefined) return;
          const again = parseAllocatorConf(formatAllocatorConf(conf));
          expect(formatAllocatorConf(again)).to.equal(formatAllocatorConf(conf));
        }),
        { numRuns: 300 },
      );
    });

    it('formatAllocatorConf gives a typed error or a string for anything it is given', async () => {
      const parsed = parseAllocatorConf('expandable_segments:True,max_split_size_mb:64');
      await fc.assert(
        fc.asyncProperty(mostly([parsed, { ...parsed, givenKeys: ['nope'] }, { givenKeys: ['max_split_size_mb'] }, { ...parsed, givenKeys: 'expandable_segments' }]), async (conf) => {
          const made = await expectTypedOrSuccess('formatAllocatorConf', () => formatAllocatorConf(conf as AllocatorConf));
          if (made !== undefined) expect(made).to.be.a('string');
        }),
        RUNS,
      );
    });

    it('readAllocatorConfFromEnv gives a typed error or a conf for any environment', async () => {
      const env = fc.oneof(
        fc.record({ PYTORCH_ALLOC_CONF: junk(['expandable_segments:True', 'nope']), PYTORCH_CUDA_ALLOC_CONF: junk(['max_split_size_mb:64']) }, { requiredKeys: [] }),
        fc.constantFrom(null, 5, 'PYTORCH_ALLOC_CONF=x', [], {}),
        junk(),
      );
      await fc.assert(
        fc.asyncProperty(env, async (e) => {
          await expectTypedOrSuccess('readAllocatorConfFromEnv', () => readAllocatorConfFromEnv(e as Record<string, string>));
        }),
        RUNS,
      );
    });
  });
});
