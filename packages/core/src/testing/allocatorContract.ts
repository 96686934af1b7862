import { expect } from 'chai';
import fc from 'fast-check';
import type { Allocator } from '../contracts/Allocator.js';
import { DataPtr } from '../storage/DataPtr.js';
import { isSameDevice } from '../contracts/Device.js';
import { StorageImpl } from '../storage/StorageImpl.js';
import { DisposedError } from '../errors/DisposedError.js';
import { DoubleFreeError } from '../errors/DoubleFreeError.js';
import { ForeignPointerError } from '../errors/ForeignPointerError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import { assertAllocatorInvariants } from './assertAllocatorInvariants.js';

/** Makes a fresh allocator for one check; the check disposes it. */
export type AllocatorMaker = () => Allocator | Promise<Allocator>;

export interface ContractCheck {
  /** A behaviour sentence, used as the mocha test title. */
  readonly name: string;
  /** Resolves when the allocator behaves; rejects with an assertion error naming what it did instead. */
  run(make: AllocatorMaker): Promise<void>;
}

async function withAllocator(make: AllocatorMaker, body: (allocator: Allocator) => Promise<void> | void): Promise<void> {
  const allocator = await make();
  try {
    await body(allocator);
  } finally {
    allocator.dispose();
  }
}

/** A byte pattern unique to `seed`, so that a block overwritten by another block's pattern is caught. */
export function patternBytes(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = (seed * 2654435761 + 1) >>> 0;
  for (let i = 0; i < length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

async function expectBytes(allocator: Allocator, ptr: DataPtr, expected: Uint8Array, what: string): Promise<void> {
  const actual = await allocator.readBytes(ptr);
  expect(actual.byteLength, `${what}: length read back`).to.equal(expected.byteLength);
  const first = actual.findIndex((b, i) => b !== expected[i]);
  expect(first, `${what}: first differing byte (-1 when equal)`).to.equal(-1);
}

function expectThrows<E extends Error>(fn: () => unknown, type: new (...args: never[]) => E, code: string, what: string): E {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown, `${what} should throw ${type.name}`).to.be.instanceOf(type);
  expect((thrown as { code?: string }).code, `${what}: error code`).to.equal(code);
  return thrown as E;
}

const SIZES = [1, 7, 64, 511, 512, 513, 4096, 65_537, 1 << 20, (1 << 20) + 1, 3 << 20];
const BAD_SIZES: readonly unknown[] = [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 2 ** 53, '16', null, undefined, 10n];

/** The contract every allocator meets. `describeAllocatorContract` runs each as a mocha test. */
export const allocatorContract: readonly ContractCheck[] = [
  {
    name: 'returns pointers of exactly the requested size, aligned, on its device',
    run: (make) =>
      withAllocator(make, (allocator) => {
        expect(allocator.alignment & (allocator.alignment - 1), 'alignment is a power of two').to.equal(0);
        const ptrs = SIZES.map((n) => allocator.allocate(n));
        ptrs.forEach((ptr, i) => {
          expect(ptr).to.be.instanceOf(DataPtr);
          expect(ptr.byteLength, `byteLength of a ${SIZES[i]}-byte request`).to.equal(SIZES[i]);
          expect(ptr.address % allocator.alignment, `address of a ${SIZES[i]}-byte request modulo alignment`).to.equal(0);
          expect(isSameDevice(ptr.device, allocator.device), 'pointer device').to.equal(true);
        });
        assertAllocatorInvariants(allocator, ptrs);
        for (const ptr of ptrs) allocator.free(ptr);
        assertAllocatorInvariants(allocator, []);
      }),
  },
  {
    name: 'serves zero-byte allocations as distinct pointers that free once',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const a = allocator.allocate(0);
        const b = allocator.allocate(0);
        expect(a.byteLength).to.equal(0);
        expect(a).to.not.equal(b);
        expect((await allocator.readBytes(a)).byteLength).to.equal(0);
        assertAllocatorInvariants(allocator, [a, b]);
        allocator.free(a);
        expectThrows(() => allocator.free(a), DoubleFreeError, 'DOUBLE_FREE', 'freeing a zero-byte pointer twice');
        allocator.free(b);
        assertAllocatorInvariants(allocator, []);
      }),
  },
  {
    name: 'keeps the data of live allocations isolated from each other',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const live = new Map<DataPtr, Uint8Array>();
        const sizes = [3, 512, 1000, 4096, 100_000, 1 << 20, 5000, 64, 2 << 20, 777];
        sizes.forEach((n, i) => {
          const ptr = allocator.allocate(n);
          const bytes = patternBytes(n, i);
          allocator.writeBytes(ptr, bytes);
          live.set(ptr, bytes);
        });
        let i = 0;
        for (const ptr of [...live.keys()]) {
          if (i++ % 2 !== 0) continue;
          allocator.free(ptr);
          live.delete(ptr);
        }
        sizes.forEach((n, j) => {
          const ptr = allocator.allocate(n);
          const bytes = patternBytes(n, 100 + j);
          allocator.writeBytes(ptr, bytes);
          live.set(ptr, bytes);
        });
        for (const [ptr, bytes] of live) await expectBytes(allocator, ptr, bytes, `a ${ptr.byteLength}-byte allocation`);
        assertAllocatorInvariants(allocator, [...live.keys()]);
      }),
  },
  {
    name: 'copies between allocations with copyData, honouring offsets',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const src = allocator.allocate(1000);
        const dst = allocator.allocate(1000);
        const source = patternBytes(1000, 1);
        allocator.writeBytes(src, source);
        allocator.writeBytes(dst, new Uint8Array(1000));
        allocator.copyData(dst, src, 500, 100, 200);
        const expected = new Uint8Array(1000);
        expected.set(source.subarray(200, 700), 100);
        await expectBytes(allocator, dst, expected, 'destination after copyData');
        await expectBytes(allocator, src, source, 'source after copyData');
        expect(await allocator.readBytes(src, 10, 5)).to.deep.equal(source.slice(10, 15));
      }),
  },
  {
    name: 'rejects copies and transfers that run past a pointer, changing nothing',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const src = allocator.allocate(100);
        const dst = allocator.allocate(100);
        const before = patternBytes(100, 2);
        allocator.writeBytes(dst, before);
        const stats = allocator.memoryStats();
        expectThrows(() => allocator.copyData(dst, src, 101), InvalidArgumentError, 'INVALID_ARGUMENT', 'copyData of 101 bytes into 100');
        expectThrows(() => allocator.copyData(dst, src, 10, 95), InvalidArgumentError, 'INVALID_ARGUMENT', 'copyData past the destination');
        expectThrows(() => allocator.copyData(dst, src, 10, 0, 91), InvalidArgumentError, 'INVALID_ARGUMENT', 'copyData past the source');
        expectThrows(() => allocator.copyData(dst, src, -1), InvalidArgumentError, 'INVALID_ARGUMENT', 'copyData of -1 bytes');
        expectThrows(() => allocator.writeBytes(dst, new Uint8Array(101)), InvalidArgumentError, 'INVALID_ARGUMENT', 'writeBytes of 101 bytes into 100');
        expectThrows(() => allocator.writeBytes(dst, new Uint8Array(2), 99), InvalidArgumentError, 'INVALID_ARGUMENT', 'writeBytes past the end');
        let rejected: unknown;
        await allocator.readBytes(src, 50, 51).catch((e: unknown) => (rejected = e));
        expect(rejected, 'readBytes past the end').to.be.instanceOf(InvalidArgumentError);
        // Before the read that checks the bytes: a device may keep that read's staging buffer (WebGPU counts it).
        expect(allocator.memoryStats()).to.deep.equal(stats);
        await expectBytes(allocator, dst, before, 'destination after rejected copies');
      }),
  },
  {
    name: 'frees a pointer once and rejects a double free without changing state',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const keep = allocator.allocate(256);
        const ptr = allocator.allocate(4096);
        expect(allocator.memoryStats()['allocation.all.current']).to.equal(2);
        allocator.free(ptr);
        expect(ptr.isReleased).to.equal(true);
        const stats = allocator.memoryStats();
        expect(stats['allocation.all.current']).to.equal(1);
        expectThrows(() => allocator.free(ptr), DoubleFreeError, 'DOUBLE_FREE', 'a second free');
        expectThrows(() => ptr.release(), DoubleFreeError, 'DOUBLE_FREE', 'a second release through the pointer');
        expect(allocator.memoryStats()).to.deep.equal(stats);
        assertAllocatorInvariants(allocator, [keep]);
      }),
  },
  {
    name: 'rejects freeing a pointer it did not allocate',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const other = await make();
        try {
          const foreign = other.allocate(128);
          const stats = allocator.memoryStats();
          let thrown: unknown;
          try {
            allocator.free(foreign);
          } catch (error) {
            thrown = error;
          }
          expect(thrown, 'freeing a pointer of another allocator').to.be.instanceOf(ForeignPointerError);
          expect(foreign.isReleased, 'the foreign pointer stays live').to.equal(false);
          expect(allocator.memoryStats()).to.deep.equal(stats);
          other.free(foreign);
          expectThrows(() => allocator.free({} as DataPtr), InvalidArgumentError, 'INVALID_ARGUMENT', 'freeing a non-pointer');
        } finally {
          other.dispose();
        }
      }),
  },
  {
    name: 'rejects use of a released pointer',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const live = allocator.allocate(64);
        const dead = allocator.allocate(64);
        allocator.free(dead);
        expectThrows(() => allocator.copyData(live, dead, 8), UseAfterReleaseError, 'USE_AFTER_RELEASE', 'copyData from a released pointer');
        expectThrows(() => allocator.copyData(dead, live, 8), UseAfterReleaseError, 'USE_AFTER_RELEASE', 'copyData into a released pointer');
        expectThrows(() => allocator.writeBytes(dead, new Uint8Array(8)), UseAfterReleaseError, 'USE_AFTER_RELEASE', 'writeBytes into a released pointer');
        let rejected: unknown;
        await allocator.readBytes(dead).catch((e: unknown) => (rejected = e));
        expect(rejected, 'readBytes of a released pointer').to.be.instanceOf(UseAfterReleaseError);
      }),
  },
  {
    name: 'keeps live blocks disjoint and statistics equal to a recount under random alloc/free',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const op = fc.oneof(
          fc.record({ kind: fc.constant('alloc' as const), bytes: fc.oneof(fc.integer({ min: 0, max: 4096 }), fc.integer({ min: 0, max: 3 << 20 })) }),
          fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }),
        );
        fc.assert(
          fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
            const live: DataPtr[] = [];
            try {
              for (const o of ops) {
                if (o.kind === 'alloc') {
                  const before = allocator.memoryStats();
                  try {
                    live.push(allocator.allocate(o.bytes));
                  } catch (error) {
                    // A bounded allocator may run out; it must say so with the typed error and change nothing.
                    expect(error, `allocate(${o.bytes}) with ${live.length} blocks live`).to.be.instanceOf(OutOfMemoryError);
                    expect(allocator.memoryStats()['allocated_bytes.all.current']).to.equal(before['allocated_bytes.all.current']);
                  }
                } else if (live.length > 0) allocator.free(live.splice(o.pick % live.length, 1)[0]!);
                assertAllocatorInvariants(allocator, live);
              }
            } finally {
              for (const ptr of live.splice(0)) allocator.free(ptr);
            }
            assertAllocatorInvariants(allocator, []);
          }),
          { numRuns: 40 },
        );
      }),
  },
  {
    name: 'emits allocated and freed events with the pointer, after its state is consistent',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const seen: string[] = [];
        const pointers: DataPtr[] = [];
        const counts: number[] = [];
        const count = (): number => allocator.memoryStats()['allocation.all.current'];
        const before = count();
        allocator.events.on('allocated', (e) => {
          seen.push(`allocated ${e.requestedBytes}`);
          pointers.push(e.ptr);
          counts.push(count());
        });
        allocator.events.on('freed', (e) => {
          seen.push(`freed ${e.ptr.byteLength}`);
          pointers.push(e.ptr);
          counts.push(count());
        });
        const ptr = allocator.allocate(300);
        allocator.free(ptr);
        expect(seen).to.deep.equal(['allocated 300', 'freed 300']);
        expect(pointers[0], 'the allocated event carries the pointer returned').to.equal(ptr);
        expect(pointers[1], 'the freed event carries the pointer freed').to.equal(ptr);
        expect(counts, 'allocation counts seen by the listeners: each event after its state changed').to.deep.equal([before + 1, before]);
      }),
  },
  {
    name: 'stays consistent when an event listener throws',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const failures: string[] = [];
        allocator.events.on('listenerFailed', (e) => failures.push(e.event));
        allocator.events.on('allocated', () => {
          throw new Error('listener bug');
        });
        const ptr = allocator.allocate(64);
        expect(ptr.byteLength).to.equal(64);
        assertAllocatorInvariants(allocator, [ptr]);
        allocator.free(ptr);
        assertAllocatorInvariants(allocator, []);
        expect(failures).to.deep.equal(['allocated']);
      }),
  },
  {
    name: 'rejects sizes that are not byte counts with InvalidArgumentError, changing nothing',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const stats = allocator.memoryStats();
        for (const bad of BAD_SIZES) {
          const error = expectThrows(() => allocator.allocate(bad as number), InvalidArgumentError, 'INVALID_ARGUMENT', `allocate(${String(bad)})`);
          expect(error.message, 'the message names the argument').to.contain('nbytes');
          expect(error.argument).to.equal('nbytes');
        }
        expect(allocator.memoryStats()).to.deep.equal(stats);
      }),
  },
  {
    name: 'rejects options that are not an options object (null, a string, an array, a number) with InvalidArgumentError, changing nothing',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const stats = allocator.memoryStats();
        for (const bad of [null, 'cpu', [], 5]) {
          const error = expectThrows(() => allocator.allocate(8, bad as never), InvalidArgumentError, 'INVALID_ARGUMENT', `allocate(8, ${JSON.stringify(bad)})`);
          expect(error.argument, 'the error names the options argument').to.equal('options');
        }
        expect(allocator.memoryStats()).to.deep.equal(stats);
        const ptr = allocator.allocate(8);
        assertAllocatorInvariants(allocator, [ptr]);
        allocator.free(ptr);
      }),
  },
  {
    name: 'refuses to free a pointer a live storage holds, changing nothing; the storage frees it on release',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const ptr = allocator.allocate(64);
        const storage = new StorageImpl({ dataPtr: ptr, allocator });
        const stats = allocator.memoryStats();
        expectThrows(() => allocator.free(storage.data()), InvalidArgumentError, 'INVALID_ARGUMENT', 'free(storage.data()) of a live storage');
        expect(ptr.isReleased, 'the storage still holds live memory').to.equal(false);
        expect(allocator.memoryStats()).to.deep.equal(stats);
        assertAllocatorInvariants(allocator, [ptr]);
        storage.release();
        expect(ptr.isReleased, 'released with its storage').to.equal(true);
        assertAllocatorInvariants(allocator, []);
      }),
  },
  {
    name: 'throws OutOfMemoryError for a request no device can hold, and keeps working',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const keep = allocator.allocate(1024);
        const before = allocator.memoryStats();
        const reported: number[] = [];
        allocator.events.on('outOfMemory', (e) => reported.push(e.requestedBytes));
        const error = expectThrows(() => allocator.allocate(Number.MAX_SAFE_INTEGER), OutOfMemoryError, 'OUT_OF_MEMORY', 'allocate(MAX_SAFE_INTEGER)');
        expect(error.requestedBytes).to.equal(Number.MAX_SAFE_INTEGER);
        expect(error.message.toLowerCase()).to.contain('tried to allocate');
        expect(reported).to.deep.equal([Number.MAX_SAFE_INTEGER]);
        const after = allocator.memoryStats();
        expect(after.num_ooms).to.equal(before.num_ooms + 1);
        expect(after['allocated_bytes.all.current']).to.equal(before['allocated_bytes.all.current']);
        const next = allocator.allocate(1024);
        assertAllocatorInvariants(allocator, [keep, next]);
      }),
  },
  {
    name: 'reports a snapshot whose blocks cover the live allocations',
    run: (make) =>
      withAllocator(make, (allocator) => {
        const ptrs = [100, 5000, 2 << 20].map((n) => allocator.allocate(n));
        const snapshot = JSON.parse(JSON.stringify(allocator.snapshot())) as ReturnType<Allocator['snapshot']>;
        expect(snapshot).to.include.keys('segments', 'device_traces', 'allocator_settings');
        const blocks = snapshot.segments.flatMap((s) => {
          expect(s).to.include.keys('address', 'total_size', 'allocated_size', 'stream', 'segment_type', 'blocks');
          const total = s.blocks.reduce((sum, b) => sum + b.size, 0);
          expect(total, `blocks of the segment at ${s.address} sum to its size`).to.be.at.most(s.total_size);
          return s.blocks;
        });
        for (const ptr of ptrs) {
          const block = blocks.find((b) => b.address === ptr.address);
          expect(block, `a block at the address of the ${ptr.byteLength}-byte pointer`).to.not.equal(undefined);
          expect(block!.state).to.equal('active_allocated');
          expect(block!.size).to.be.at.least(ptr.byteLength);
          expect(block!.requested_size).to.equal(ptr.byteLength);
        }
      }),
  },
  {
    name: 'keeps live data through emptyCache and resets peaks to current',
    run: (make) =>
      withAllocator(make, async (allocator) => {
        const big = allocator.allocate(4 << 20);
        const small = allocator.allocate(1000);
        const bytes = patternBytes(1000, 9);
        allocator.writeBytes(small, bytes);
        allocator.free(big);
        allocator.emptyCache();
        await expectBytes(allocator, small, bytes, 'a live allocation after emptyCache');
        assertAllocatorInvariants(allocator, [small]);
        allocator.resetPeakStats();
        const stats = allocator.memoryStats();
        expect(stats['allocated_bytes.all.peak']).to.equal(stats['allocated_bytes.all.current']);
      }),
  },
  {
    name: 'refuses every call after dispose, and disposes idempotently',
    run: async (make) => {
      const allocator = await make();
      const ptr = allocator.allocate(64);
      allocator.dispose();
      allocator.dispose();
      expectThrows(() => allocator.allocate(8), DisposedError, 'DISPOSED', 'allocate after dispose');
      expectThrows(() => allocator.memoryStats(), DisposedError, 'DISPOSED', 'memoryStats after dispose');
      expectThrows(() => allocator.resetPeakStats(), DisposedError, 'DISPOSED', 'resetPeakStats after dispose');
      expectThrows(() => allocator.snapshot(), DisposedError, 'DISPOSED', 'snapshot after dispose');
      expectThrows(() => allocator.emptyCache(), DisposedError, 'DISPOSED', 'emptyCache after dispose');
      expect(() => ptr.release(), 'releasing a pointer that outlived its allocator').to.not.throw();
    },
  },
];

