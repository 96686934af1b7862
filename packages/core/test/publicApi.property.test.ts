import { expect } from 'chai';
import fc from 'fast-check';
import type { Allocator, DataPtr, MinimalAllocator, Runtime } from '@stowage/core';
import { CachingAllocator, CpuMemoryBackend, FailureCallbackAllocator, ForwardingAllocator, LimitingAllocator, LoggingAllocator, StatisticsAllocator, StorageImpl, TensorImpl, TrackingAllocator, cpu, createCpuAllocator, createRuntime, formatBytes, makeAllocator, parseBytes, parseDevice, wrapAllocators } from '@stowage/core';
import { AliasReshapePolicy, hostBytes, makeDirectAllocator, parseRmmCsv, viewStrides } from '@stowage/core/plugin-kit';
import { parseRmmCsvLog, replayTrace, traceSummary } from '@stowage/core/replay';
import type { TraceEvent } from '@stowage/core/replay';
import { assertAllocatorInvariants, expectTypedOrSuccess, junkArgs as args, VirtualMemoryBackend } from '@stowage/core/testing';

/**
 * Note [The public API under junk]: every public entry point of core, called with generated junk (wrong types,
 * null, undefined, huge, negative and fractional numbers, NaN, strings, arrays, objects with unknown keys,
 * functions), either succeeds or throws a StowageError with a code, never another error; and afterwards the
 * allocator it touched still allocates, and its statistics equal a recount of the pointers the test holds.
 * Plausible values (small byte counts, 'cpu', 'float32', the runtime's own storages and pointers) are mixed in,
 * so that calls get past their first check. Not fed junk: `new DataPtr(init)`, which only allocators call, on the
 * allocation path (Note [Few large functions on the hot path]), and which checks nothing by design.
 */

/** The next allocation works and statistics equal a recount of `live`. */
function expectConsistent(allocator: Allocator, live: readonly DataPtr[]): void {
  assertAllocatorInvariants(allocator, live);
  const ptr = allocator.allocate(64);
  assertAllocatorInvariants(allocator, [...live, ptr]);
  allocator.free(ptr);
}

/** Releases whatever a call made that owns memory. */
function releaseMade(value: unknown): void {
  if (value instanceof StorageImpl) value.release();
  else if (value instanceof TensorImpl) value.storage.release();
  else if (value !== null && typeof value === 'object' && typeof (value as Partial<Allocator>).dispose === 'function' && typeof (value as Partial<Allocator>).allocate === 'function') {
    (value as Allocator).dispose();
  }
}

const RUNS = { numRuns: 150 };

describe('the public API of core under junk (Note [The public API under junk])', () => {
  let rt: Runtime;
  beforeEach(async () => {
    rt = await createRuntime();
  });
  afterEach(async () => {
    await rt.dispose();
  });

  /** The runtime's plausible values: a live storage, a tensor over it, a pointer no storage holds. */
  function fixtures() {
    const storage = rt.storage(64, { resizable: true });
    const tensor = rt.tensor([2, 3]);
    const free = rt.allocator().allocate(32);
    return { storage, tensor, free, plausible: [storage, tensor, free, storage.data(), [4], [2, 2], 8, 0, 'cpu', 'float32', { device: 'cpu' }] };
  }

  /** The pointers the fixtures hold live on the CPU allocator. */
  function livePointers(f: ReturnType<typeof fixtures>): DataPtr[] {
    return [f.storage, f.tensor.storage].filter((s) => !s.isReleased).map((s) => s.peekDataPtr()).concat(f.free.isReleased ? [] : [f.free]);
  }

  const runtimeCalls: [string, number, (a: unknown[]) => unknown][] = [
    ['Runtime#storage', 2, (a) => rt.storage(a[0] as number, a[1] as object)],
    ['Runtime#tensor', 2, (a) => rt.tensor(a[0] as number[], a[1] as object)],
    ['Runtime#allocator', 1, (a) => rt.allocator(a[0] as string)],
    ['Runtime#adopt', 1, (a) => rt.adopt(a[0] as DataPtr)],
    ['Runtime#write', 3, (a) => rt.write(a[0] as StorageImpl, a[1] as Uint8Array, a[2] as number)],
    ['Runtime#read', 1, (a) => rt.read(a[0] as StorageImpl)],
  ];
  for (const [name, arity, call] of runtimeCalls) {
    it(`${name} gives a typed error or succeeds, and leaves the CPU allocator consistent`, async () => {
      const f = fixtures();
      await fc.assert(
        fc.asyncProperty(args(arity, f.plausible), async (a) => {
          const made = await expectTypedOrSuccess(name, () => call(a));
          // What the call made (a storage, a tensor) goes; an allocator the runtime owns stays.
          if (made instanceof StorageImpl && made !== f.storage && made !== f.tensor.storage) made.release();
          else if (made instanceof TensorImpl && made.storage !== f.storage && made.storage !== f.tensor.storage) made.storage.release();
          expectConsistent(rt.allocator(), livePointers(f));
        }),
        RUNS,
      );
    });
  }

  const allocatorCalls: [string, number, (x: Allocator, a: unknown[]) => unknown][] = [
    ['Allocator#allocate', 2, (x, a) => x.allocate(a[0] as number, a[1] as object)],
    ['Allocator#free', 1, (x, a) => x.free(a[0] as DataPtr)],
    ['Allocator#copyData', 5, (x, a) => x.copyData(a[0] as DataPtr, a[1] as DataPtr, a[2] as number, a[3] as number, a[4] as number)],
    ['Allocator#writeBytes', 3, (x, a) => x.writeBytes(a[0] as DataPtr, a[1] as Uint8Array, a[2] as number)],
    ['Allocator#readBytes', 3, (x, a) => x.readBytes(a[0] as DataPtr, a[1] as number, a[2] as number)],
    ['Allocator#recordStream', 2, (x, a) => x.recordStream?.(a[0] as DataPtr, a[1] as number)],
  ];
  const allocators: [string, () => Allocator][] = [
    ['the CPU allocator', () => createCpuAllocator()],
    ['a direct allocator', () => makeDirectAllocator(new CpuMemoryBackend())],
    ['a caching engine on a virtual device', () => new CachingAllocator(new VirtualMemoryBackend({ streams: 2 }))],
    ['a StatisticsAllocator', () => new StatisticsAllocator(createCpuAllocator())],
    ['a LimitingAllocator', () => new LimitingAllocator(createCpuAllocator(), '1MiB')],
    ['a TrackingAllocator', () => new TrackingAllocator(createCpuAllocator(), { captureStacks: false })],
    ['a LoggingAllocator', () => new LoggingAllocator(createCpuAllocator(), () => {})],
    ['a FailureCallbackAllocator', () => new FailureCallbackAllocator(createCpuAllocator(), () => false)],
  ];
  for (const [kind, make] of allocators) {
    for (const [name, arity, call] of allocatorCalls) {
      it(`${name} on ${kind} gives a typed error or succeeds, and stays consistent`, async () => {
        using allocator = make();
        const held = allocator.allocate(16);
        const storage = new StorageImpl({ dataPtr: allocator.allocate(16), allocator });
        const plausible = [held, storage.data(), 8, 0, 16, new Uint8Array(8), { shared: false }];
        await fc.assert(
          fc.asyncProperty(args(arity, plausible), async (a) => {
            const made = await expectTypedOrSuccess(name, () => call(allocator, a));
            if (name === 'Allocator#allocate' && made !== undefined) allocator.free(made as DataPtr);
            expect(storage.isReleased).to.equal(false);
            expect(storage.peekDataPtr().isReleased, 'a live storage reports freed memory').to.equal(false);
            expectConsistent(allocator, [held, storage.peekDataPtr()].filter((p) => !p.isReleased));
          }),
          RUNS,
        );
      });
    }
  }

  it('TensorImpl methods give a typed error or succeed, and leave the CPU allocator consistent', async () => {
    const f = fixtures();
    const methods = ['view', 'reshape', 'asStrided', 'withStorage', 'withShadow', 'contiguous', 'clone', 'data', 'mutableData'] as const;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...methods), args(3, f.plausible), async (method, a) => {
        const fn = (f.tensor as unknown as Record<string, (...x: unknown[]) => unknown>)[method]!;
        const made = await expectTypedOrSuccess(`TensorImpl#${method}`, () => fn.apply(f.tensor, a));
        if (made instanceof TensorImpl && made.storage !== f.tensor.storage && made.storage !== f.storage) made.storage.release();
        expectConsistent(rt.allocator(), livePointers(f));
      }),
      RUNS,
    );
  });

  it('AliasReshapePolicy#reshape, viewStrides and hostBytes give a typed error or succeed', async () => {
    const f = fixtures();
    const policy = new AliasReshapePolicy();
    const calls: [string, (a: unknown[]) => unknown][] = [
      ['AliasReshapePolicy#reshape', (a) => policy.reshape(a[0] as TensorImpl, a[1] as number[])],
      ['viewStrides', (a) => viewStrides(a[0] as number[], a[1] as number[], a[2] as number[])],
      ['hostBytes', (a) => hostBytes(a[0] as DataPtr)],
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...calls), args(3, [...f.plausible, [3, 1], [6], [1]]), async ([name, call], a) => {
        const made = await expectTypedOrSuccess(name, () => call(a));
        if (made instanceof TensorImpl && made.storage !== f.tensor.storage && made.storage !== f.storage) made.storage.release();
        expectConsistent(rt.allocator(), livePointers(f));
      }),
      RUNS,
    );
  });

  it('StorageImpl methods give a typed error or succeed, and leave the CPU allocator consistent', async () => {
    const f = fixtures();
    const methods = ['sibling', 'setDataPtr', 'resize', 'data', 'mutableData'] as const;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...methods), args(1, [...f.plausible, 64]), async (method, a) => {
        const fn = (f.storage as unknown as Record<string, (...x: unknown[]) => unknown>)[method]!;
        const made = await expectTypedOrSuccess(`StorageImpl#${method}`, () => fn.apply(f.storage, a));
        if (made instanceof StorageImpl && made !== f.storage) made.release();
        else if (method === 'setDataPtr' && made !== undefined && made !== f.storage.peekDataPtr()) (made as DataPtr).release();
        expect(f.storage.peekDataPtr().isReleased, 'a live storage reports freed memory').to.equal(false);
        expectConsistent(rt.allocator(), livePointers(f));
      }),
      RUNS,
    );
  });

  const upstream = (): Allocator => createCpuAllocator();
  const TRACE: readonly TraceEvent[] = [
    { action: 'alloc', id: 0, size: 1024, stream: 0, addr: 0, timeUs: null },
    { action: 'free_requested', id: 0, size: 1024, stream: 0, addr: 0, timeUs: null },
  ];
  const entries: [string, (a: unknown[]) => unknown][] = [
    ['createRuntime', async (a) => (await createRuntime(a[0] as object)).dispose()],
    ['new CachingAllocator(junk)', (a) => new CachingAllocator(a[0] as never, a[1] as object)],
    ['new CachingAllocator(backend, junk)', (a) => new CachingAllocator(new VirtualMemoryBackend(), a[0] as object)],
    ['makeAllocator', (a) => makeAllocator(a[0] as MinimalAllocator)],
    ['makeDirectAllocator', (a) => makeDirectAllocator(a[0] as never)],
    ['new ForwardingAllocator', (a) => new ForwardingAllocator(a[0] as Allocator, a[1] as object)],
    ['new ForwardingAllocator(upstream, junk)', (a) => new ForwardingAllocator(upstream(), a[0] as object)],
    ['new StatisticsAllocator', (a) => new StatisticsAllocator(a[0] as Allocator, a[1] as object)],
    ['new StatisticsAllocator(upstream, junk)', (a) => new StatisticsAllocator(upstream(), a[0] as object)],
    ['new LimitingAllocator', (a) => new LimitingAllocator(a[0] as Allocator, a[1] as number, a[2] as object)],
    ['new LimitingAllocator(upstream, junk)', (a) => new LimitingAllocator(upstream(), a[0] as number, a[1] as object)],
    ['new LoggingAllocator', (a) => new LoggingAllocator(a[0] as Allocator, a[1] as never, a[2] as object)],
    ['new LoggingAllocator(upstream, sink, options)', (a) => new LoggingAllocator(upstream(), a[0] as never, a[1] as object)],
    ['new FailureCallbackAllocator', (a) => new FailureCallbackAllocator(a[0] as Allocator, a[1] as never, a[2] as object)],
    ['new FailureCallbackAllocator(upstream, junk)', (a) => new FailureCallbackAllocator(upstream(), a[0] as never, a[1] as object)],
    ['new TrackingAllocator', (a) => new TrackingAllocator(a[0] as Allocator, a[1] as object)],
    ['new TrackingAllocator(upstream, options)', (a) => new TrackingAllocator(upstream(), a[0] as object)],
    ['new StorageImpl', (a) => new StorageImpl(a[0] as never)],
    ['wrapAllocators', (a) => wrapAllocators(a[0] as string, a[1] as never)],
    ['cpu', (a) => cpu(a[0] as object)],
    ['createCpuAllocator', (a) => createCpuAllocator(a[0] as object)],
    ['parseDevice', (a) => parseDevice(a[0] as string, a[1] as string)],
    ['parseBytes', (a) => parseBytes(a[0] as string)],
    ['formatBytes', (a) => formatBytes(a[0] as number)],
    ['parseRmmCsv', (a) => parseRmmCsv(a[0] as string, a[1] as string)],
    // The replay entry's parsers and replay (its file readers pass the file system's errors through, by design).
    ['parseRmmCsvLog', (a) => parseRmmCsvLog(a[0] as string, a[1] as string)],
    ['traceSummary', (a) => traceSummary(a[0] as never)],
    ['replayTrace', (a) => replayTrace(a[0] as Allocator, a[1] as never, a[2] as object)],
    ['replayTrace(allocator, events, junk)', (a) => replayTrace(upstream(), TRACE, a[0] as object)],
  ];
  for (const [name, call] of entries) {
    it(`${name} gives a typed error or succeeds`, async () => {
      const plausible = [new VirtualMemoryBackend(), 1024, '1KiB', () => {}, { captureStacks: false }, createCpuAllocator()];
      await fc.assert(
        fc.asyncProperty(args(3, plausible), async (a) => {
          releaseMade(await expectTypedOrSuccess(name, () => call(a)));
        }),
        RUNS,
      );
    });
  }
});
