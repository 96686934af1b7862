/**
 * The caching engine under random programs that drive every path at once: several streams with recordStream and
 * held events, reclaimers that free during the out-of-memory chain, quick lists, segment kinds, deferred frees,
 * capacity and memory limits, garbage collection, the non-expandable path with a max split size, and listeners
 * that allocate or free mid-operation. After every step it checks: assertInvariants, reserved bytes against the
 * backend, whole-page map/unmap calls that map only unmapped pages and unmap only mapped ones, snapshot coverage,
 * segment events of some bytes each adding up to reserved bytes, inactive_split and oversize counters against a
 * recount (an oversize allocation counted out when the caller frees it, as PyTorch does), disjoint live pointers
 * lying in backed memory of their stream and kind, no reuse of memory whose free-time events are incomplete,
 * intact data, and no out-of-memory error while a fresh segment for the request would still fit.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import type { AllocateOptions, CachingAllocatorOptions, DataPtr } from '@stowage/core';
import type { MemoryBlock, MemoryReclaimer } from '@stowage/core/plugin-kit';
import { CachingAllocator, OutOfMemoryError } from '@stowage/core';
import { roundSize, segmentSize } from '@stowage/core/plugin-kit';
import { expectSnapshotCoversReserved, KiB, MiB } from './helpers.js';
import type { VirtualMemoryBackendOptions } from '@stowage/core/testing';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** A virtual device whose segments come in two kinds (usage 'upload' is kind 1), optionally freeing late (WebGPU-like). */
class KindedBackend extends VirtualMemoryBackend {
  readonly deferredFree: boolean;
  constructor({ kinds, deferredFree, ...options }: VirtualMemoryBackendOptions & { kinds?: boolean; deferredFree?: boolean }) {
    super(options);
    this.deferredFree = deferredFree ?? false;
    if (kinds) this.segmentKind = (o: AllocateOptions): number => (o.usage === 'upload' ? 1 : 0);
  }
  segmentKind?: (o: AllocateOptions) => number;
}

interface Rig {
  /** The stream and kind of the request being served (set by the caller around allocate). */
  request: { stream: number; kind: number } | null;
  allocator: CachingAllocator<number>;
  backend: KindedBackend;
  /** Checks every property this file lists against the live pointers the caller holds. */
  check(live: readonly DataPtr[]): Promise<void>;
  /** Stamps a fresh pointer with data that check() reads back. */
  stamp(ptr: DataPtr): void;
  problems: string[];
}

interface RigOptions {
  engine: CachingAllocatorOptions;
  device?: VirtualMemoryBackendOptions & { kinds?: boolean; deferredFree?: boolean };
  reclaimers?: () => readonly MemoryReclaimer[];
}

/**
 * An engine over a backend that records every malloc/free/map/unmap: each map/unmap must be a positive whole
 * number of pages at a page-aligned offset, map only unmapped pages and unmap only mapped ones; every live
 * pointer must lie in backed memory; the data stamped into each live pointer must read back intact.
 */
function rig(o: RigOptions): Rig {
  const backend = new KindedBackend({ storeData: true, ...o.device });
  const allocator = new CachingAllocator(backend, { ...o.engine, ...(o.reclaimers ? { reclaimers: o.reclaimers } : {}) });
  const problems: string[] = [];
  const mallocs = new Map<number, number>(); // address -> bytes
  const ranges: { address: number; bytes: number; kind: number; stream: number }[] = []; // every segment or reserved range
  // Blocks freed with events: their range must not be handed out again before every event completed.
  let recorded: import('@stowage/core/plugin-kit').BackendEvent[] = [];
  let waiting: { address: number; bytes: number; events: import('@stowage/core/plugin-kit').BackendEvent[] }[] = [];
  const recordEvent = backend.recordEvent.bind(backend);
  backend.recordEvent = (stream) => {
    const e = recordEvent(stream);
    recorded.push(e);
    return e;
  };
  const mapped = new Set<number>(); // page indices
  const mapping = backend.pageMapping;
  const page = mapping?.pageBytes ?? 0;
  const malloc = backend.malloc.bind(backend);
  const free = backend.free.bind(backend);
  backend.malloc = (bytes: number): MemoryBlock<number> | null => {
    if (!(bytes > 0) || !Number.isSafeInteger(bytes)) problems.push(`malloc(${bytes})`);
    const m = malloc(bytes);
    if (m) {
      mallocs.set(m.address, bytes);
      if (self.request) ranges.push({ address: m.address, bytes, ...self.request });
    }
    return m;
  };
  backend.free = (m: MemoryBlock<number>): void => {
    if (mallocs.get(m.address) !== m.byteLength) problems.push(`free of an unknown segment at 0x${m.address.toString(16)}`);
    mallocs.delete(m.address);
    free(m);
  };
  if (mapping) {
    const reserve = mapping.reserve.bind(mapping);
    mapping.reserve = (bytes) => {
      const m = reserve(bytes);
      if (m && self.request) ranges.push({ address: m.address, bytes, ...self.request });
      return m;
    };
    const map = mapping.map.bind(mapping);
    const unmap = mapping.unmap.bind(mapping);
    mapping.map = (range, offset, bytes) => {
      const at = range.address + offset;
      if (!(bytes > 0) || bytes % page !== 0 || at % page !== 0) {
        problems.push(`map(${offset}, ${bytes})`);
        return map(range, offset, bytes);
      }
      const ok = map(range, offset, bytes);
      if (ok) {
        for (let p = at / page; p < (at + bytes) / page; p++) {
          if (mapped.has(p)) problems.push(`map of a mapped page at 0x${(p * page).toString(16)}`);
          mapped.add(p);
        }
      }
      return ok;
    };
    mapping.unmap = (range, offset, bytes) => {
      const at = range.address + offset;
      if (!(bytes > 0) || bytes % page !== 0 || at % page !== 0) problems.push(`unmap(${offset}, ${bytes})`);
      else {
        for (let p = at / page; p < (at + bytes) / page; p++) {
          if (!mapped.has(p)) problems.push(`unmap of an unmapped page at 0x${(p * page).toString(16)}`);
          mapped.delete(p);
        }
      }
      unmap(range, offset, bytes);
    };
  }
  // Segment events: emitted only with the engine's state whole (Note [Segment events]), each of some bytes; their
  // net sum is the reserved bytes once the engine is idle.
  let netEventBytes = 0;
  const whole = (what: string) => (): void => {
    try {
      allocator.assertInvariants();
      if (allocator.memoryStats()['reserved_bytes.all.current'] !== backend.reservedBytes) problems.push(`${what}: reserved bytes differ from the backend's`);
    } catch (error) {
      problems.push(`${what}: ${(error as Error).message}`);
    }
  };
  allocator.events.on('segmentReserved', (e) => {
    if (!(e.bytes > 0)) problems.push(`segmentReserved of ${e.bytes} bytes`);
    netEventBytes += e.bytes;
    whole('segmentReserved')();
  });
  allocator.events.on('segmentReleased', (e) => {
    if (!(e.bytes > 0)) problems.push(`segmentReleased of ${e.bytes} bytes`);
    netEventBytes -= e.bytes;
    whole('segmentReleased')();
  });
  allocator.events.on('freed', (e) => {
    whole('freed')();
    if (recorded.length > 0) waiting.push({ address: e.ptr.address, bytes: e.ptr.byteLength, events: recorded });
    recorded = [];
  });
  allocator.events.on('allocated', (e) => {
    whole('allocated')();
    const ptr = e.ptr;
    waiting = waiting.filter((w) => !w.events.every((ev) => backend.isEventComplete(ev)));
    for (const w of waiting) {
      if (ptr.address < w.address + w.bytes && w.address < ptr.address + Math.max(1, ptr.byteLength)) {
        problems.push(`the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)} reuses memory freed with events still incomplete`);
      }
    }
    const range = ranges.find((r) => ptr.address >= r.address && ptr.address < r.address + r.bytes);
    if (!range) problems.push(`no segment holds 0x${ptr.address.toString(16)}`);
    else if (self.request && (range.kind !== self.request.kind || range.stream !== self.request.stream)) {
      problems.push(`a request of kind ${self.request.kind} on stream ${self.request.stream} got memory of kind ${range.kind} on stream ${range.stream}`);
    }
  });
  const stamps = new Map<DataPtr, Uint8Array>();
  let serial = 0;
  const stampOf = (): Uint8Array => {
    serial++;
    const s = new Uint8Array(8);
    new DataView(s.buffer).setFloat64(0, serial + 0.5);
    return s;
  };
  const isBacked = (address: number, bytes: number): boolean => {
    for (const [a, n] of mallocs) if (address >= a && address + bytes <= a + n) return true;
    if (!page) return false;
    for (let p = Math.floor(address / page); p * page < address + bytes; p++) if (!mapped.has(p)) return false;
    return true;
  };
  const self: Rig = {
    request: null,
    allocator,
    backend,
    problems,
    stamp(ptr) {
      const s = stampOf();
      stamps.set(ptr, s);
      allocator.writeBytes(ptr, s.subarray(0, Math.min(8, ptr.byteLength)));
      if (ptr.byteLength >= 16) allocator.writeBytes(ptr, s, ptr.byteLength - 8);
    },
    async check(live) {
      expect(problems, 'backend calls and events').to.deep.equal([]);
      allocator.assertInvariants();
      expect(allocator.memoryStats()['reserved_bytes.all.current'], 'reserved bytes against the backend').to.equal(backend.reservedBytes);
      expectSnapshotCoversReserved(allocator);
      expect(netEventBytes, 'segment events add up to the reserved bytes').to.equal(allocator.reservedBytes);
      expectSplitAndOversizeRecount(allocator);
      const sorted = [...live].sort((a, b) => a.address - b.address);
      for (let i = 1; i < sorted.length; i++) {
        expect(sorted[i - 1]!.address + sorted[i - 1]!.byteLength, 'live allocations overlap').to.be.at.most(sorted[i]!.address);
      }
      expect(allocator.memoryStats()['allocation.all.current'], 'allocations counted').to.equal(live.length);
      for (const ptr of live) {
        expect(isBacked(ptr.address, ptr.byteLength), `the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)} lies in backed memory`).to.equal(true);
        const s = stamps.get(ptr)!;
        const head = await allocator.readBytes(ptr, 0, Math.min(8, ptr.byteLength));
        expect([...head], `data at the start of 0x${ptr.address.toString(16)}`).to.deep.equal([...s.subarray(0, Math.min(8, ptr.byteLength))]);
        if (ptr.byteLength >= 16) {
          const tail = await allocator.readBytes(ptr, ptr.byteLength - 8, 8);
          expect([...tail], `data at the end of 0x${ptr.address.toString(16)}`).to.deep.equal([...s]);
        }
      }
    },
  };
  return self;
}

/** inactive_split(_bytes), oversize_allocations and oversize_segments against a recount from the snapshot. */
function expectSplitAndOversizeRecount(allocator: CachingAllocator<number>): void {
  const stats = allocator.memoryStats();
  const maxSplit = allocator.options.maxSplitSize;
  const recount = { split: [0, 0], splitBytes: [0, 0], oversizeAllocations: 0, oversizeSegments: 0 };
  for (const segment of allocator.snapshot().segments) {
    const pool = segment.segment_type === 'small' ? 0 : 1;
    if (!segment.is_expandable) {
      if (segment.total_size >= maxSplit) recount.oversizeSegments++;
      if (segment.blocks.length > 1) {
        for (const b of segment.blocks) {
          if (b.state !== 'inactive') continue;
          recount.split[pool]!++;
          recount.splitBytes[pool]! += b.size;
        }
      }
    }
    // PyTorch counts an oversize allocation out when the caller frees it (free()), not when its events complete.
    for (const b of segment.blocks) if (b.state === 'active_allocated' && b.size >= maxSplit) recount.oversizeAllocations++;
  }
  expect([stats['inactive_split.small_pool.current'], stats['inactive_split.large_pool.current']], 'inactive_split').to.deep.equal(recount.split);
  expect([stats['inactive_split_bytes.small_pool.current'], stats['inactive_split_bytes.large_pool.current']], 'inactive_split_bytes').to.deep.equal(recount.splitBytes);
  expect(stats['oversize_allocations.current'], 'oversize_allocations').to.equal(recount.oversizeAllocations);
  expect(stats['oversize_segments.current'], 'oversize_segments').to.equal(recount.oversizeSegments);
}

const SEED = 12; // fixed so the run is reproducible
const RUNS = 50;
const STREAMS = 3;

type Step =
  | { kind: 'alloc'; bytes: number; stream: number; upload: boolean }
  | { kind: 'free'; pick: number }
  | { kind: 'recordStream'; pick: number; stream: number }
  | { kind: 'hold'; stream: number }
  | { kind: 'complete'; stream: number }
  | { kind: 'reclaimable'; pick: number }
  | { kind: 'emptyCache' }
  | { kind: 'trim'; target: number }
  | { kind: 'onEvent'; event: 'allocated' | 'freed' | 'segmentReserved' | 'segmentReleased'; action: 'alloc' | 'free'; bytes: number; pick: number };

const sizes = fc.oneof(
  { weight: 2, arbitrary: fc.tuple(fc.integer({ min: 1, max: 20 }), fc.constantFrom(-512, 0, 512)).map(([pages, d]) => pages * 2 * MiB + d) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 64 * KiB }) },
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 1 * MiB }) },
  { weight: 3, arbitrary: fc.integer({ min: 1 * MiB, max: 8 * MiB }) },
  { weight: 3, arbitrary: fc.integer({ min: 8 * MiB, max: 40 * MiB }) },
  { weight: 1, arbitrary: fc.integer({ min: 40 * MiB, max: 80 * MiB }) },
);
const stream = fc.integer({ min: 0, max: STREAMS - 1 });
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 10, arbitrary: fc.record({ kind: fc.constant('alloc' as const), bytes: sizes, stream, upload: fc.boolean() }) },
  { weight: 7, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('recordStream' as const), pick: fc.nat(), stream }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('hold' as const), stream }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('complete' as const), stream }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('reclaimable' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'emptyCache' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('trim' as const), target: fc.integer({ min: 0, max: 256 * MiB }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('onEvent' as const),
      event: fc.constantFrom('allocated' as const, 'freed' as const, 'segmentReserved' as const, 'segmentReleased' as const),
      action: fc.constantFrom('alloc' as const, 'free' as const),
      bytes: sizes,
      pick: fc.nat(),
    }),
  },
);

interface Config {
  name: string;
  engine: CachingAllocatorOptions;
  device: VirtualMemoryBackendOptions & { kinds?: boolean; deferredFree?: boolean };
  reclaim?: boolean;
}

const CAPACITY = 160 * MiB;
const configs: Config[] = [
  { name: 'expandable, pytorch preset, max split 32 MiB, fragmentation limit', engine: { preset: 'pytorch', expandableSegments: true, segmentPageBytes: 2 * MiB, maxSplitSize: 32 * MiB, fragmentationLimit: 0.005 }, device: { streams: STREAMS, capacityBytes: CAPACITY }, reclaim: true },
  { name: 'best preset (quick lists, unified pools, expandable), max split 32 MiB', engine: { preset: 'best', maxSplitSize: 32 * MiB }, device: { streams: STREAMS, capacityBytes: CAPACITY }, reclaim: true },
  { name: 'best preset, 64 KiB pages, two segment kinds', engine: { preset: 'best' }, device: { streams: STREAMS, capacityBytes: CAPACITY, pageBytes: 64 * KiB, kinds: true }, reclaim: true },
  { name: 'best preset, deferred free (WebGPU-like), two segment kinds', engine: { preset: 'best', maxSplitSize: 24 * MiB }, device: { streams: STREAMS, capacityBytes: CAPACITY, kinds: true, deferredFree: true }, reclaim: true },
  { name: 'non-expandable pytorch preset, max split 24 MiB, garbage collection under a limit', engine: { preset: 'pytorch', maxSplitSize: 24 * MiB, memoryLimit: 128 * MiB, garbageCollectionThreshold: 0.6 }, device: { streams: STREAMS, capacityBytes: CAPACITY, pageBytes: 0 }, reclaim: true },
  { name: 'non-expandable best preset (unified pools, quick lists), max split 24 MiB', engine: { preset: 'best', expandableSegments: false, maxSplitSize: 24 * MiB }, device: { streams: STREAMS, capacityBytes: CAPACITY, kinds: true }, reclaim: true },
  { name: 'expandable pytorch preset with a memory limit, two kinds', engine: { preset: 'pytorch', expandableSegments: true, segmentPageBytes: 2 * MiB, maxSplitSize: 24 * MiB, fragmentationLimit: 0.1, memoryLimit: 120 * MiB }, device: { streams: STREAMS, capacityBytes: CAPACITY, kinds: true }, reclaim: true },
  { name: 'expandable pytorch preset with quick lists and power-of-two divisions', engine: { preset: 'pytorch', expandableSegments: true, segmentPageBytes: 2 * MiB, deferCoalescing: true, maxSplitSize: 32 * MiB, fragmentationLimit: 0.005, roundupPower2Divisions: 4 }, device: { streams: STREAMS, capacityBytes: CAPACITY }, reclaim: true },
  { name: 'growing segments (WebGPU sizing), quick lists, deferred free, two kinds', engine: { preset: 'best', expandableSegments: false, segmentSize: (n, reserved) => Math.max(n, 4 * MiB, Math.ceil(reserved / 4 / (2 * MiB)) * 2 * MiB) }, device: { streams: STREAMS, capacityBytes: CAPACITY, kinds: true, deferredFree: true }, reclaim: true },
];

/** Bytes a fresh segment (or fresh pages) for a request would take: more free device memory than this means the OOM was spurious. */
function freshBytes(config: Config, backend: VirtualMemoryBackend, nbytes: number): number {
  const size = roundSize(nbytes, config.engine.roundupPower2Divisions === 4 ? new Array<number>(16).fill(4) : []);
  if (config.engine.segmentSize) return size;
  const page = backend.pageMapping?.pageBytes;
  const expandable = (config.engine.expandableSegments ?? config.engine.preset === 'best') && page !== undefined;
  return expandable ? Math.ceil(size / page) * page : segmentSize(size);
}

async function runProgram(config: Config, steps: readonly Step[]): Promise<void> {
  const live: DataPtr[] = [];
  let reclaimable: DataPtr[] = [];
  let done = false;
  let listenerRan = false;
  let r: Rig | undefined = undefined;
  const reclaimer: MemoryReclaimer = {
    reclaim: () => {
      let freed = 0;
      for (let ptr = reclaimable.pop(); ptr !== undefined; ptr = reclaimable.pop()) {
        const at = live.indexOf(ptr);
        if (at < 0) continue;
        live.splice(at, 1);
        freed += ptr.byteLength;
        r!.allocator.free(ptr);
      }
      return freed;
    },
  };
  r = rig({ engine: config.engine, device: config.device, ...(config.reclaim ? { reclaimers: () => [reclaimer] } : {}) });
  const { allocator, backend } = r;
  const limit = typeof config.engine.memoryLimit === 'number' ? Math.min(config.engine.memoryLimit, CAPACITY) : CAPACITY;
  for (const s of steps) {
    switch (s.kind) {
      case 'alloc': {
        const options: AllocateOptions = { stream: s.stream, ...(s.upload ? { usage: 'upload' } : {}) };
        r.request = { stream: s.stream, kind: config.device.kinds && s.upload ? 1 : 0 };
        listenerRan = false;
        try {
          const ptr = allocator.allocate(s.bytes, options);
          live.push(ptr);
          r.stamp(ptr);
        } catch (error) {
          if (!(error instanceof OutOfMemoryError)) throw error;
          const freeBytes = limit - backend.reservedBytes;
          // A listener that ran during the chain may free memory after the engine gave up.
          if (!listenerRan) expect(freeBytes, `out of memory for ${s.bytes} bytes with ${freeBytes} bytes free`).to.be.lessThan(freshBytes(config, backend, s.bytes));
        } finally {
          r.request = null;
        }
        break;
      }
      case 'free':
        if (live.length > 0) {
          const ptr = live.splice(s.pick % live.length, 1)[0]!;
          reclaimable = reclaimable.filter((p) => p !== ptr);
          allocator.free(ptr);
        }
        break;
      case 'recordStream':
        if (live.length > 0) allocator.recordStream(live[s.pick % live.length]!, s.stream);
        break;
      case 'hold':
        backend.holdStream(s.stream);
        break;
      case 'complete':
        backend.completeStream(s.stream);
        break;
      case 'reclaimable':
        if (live.length > 0) {
          const ptr = live[s.pick % live.length]!;
          if (!reclaimable.includes(ptr)) reclaimable.push(ptr);
        }
        break;
      case 'emptyCache':
        allocator.emptyCache();
        break;
      case 'onEvent': {
        let inListener = false;
        allocator.events.once(s.event, () => {
          if (inListener || done) return;
          inListener = true;
          listenerRan = true;
          const saved = r!.request;
          try {
            if (s.action === 'alloc') {
              r!.request = { stream: 0, kind: 0 };
              const ptr = allocator.allocate(s.bytes);
              live.push(ptr);
              r!.stamp(ptr);
            } else if (live.length > 0) {
              const ptr = live.splice(s.pick % live.length, 1)[0]!;
              reclaimable = reclaimable.filter((p) => p !== ptr);
              allocator.free(ptr);
            }
          } catch (error) {
            if (!(error instanceof OutOfMemoryError)) r!.problems.push(`listener: ${(error as Error).message}`);
          } finally {
            r!.request = saved;
            inListener = false;
          }
        });
        break;
      }
      case 'trim':
        expect(allocator.trim(s.target), 'trim returns the reserved bytes').to.equal(allocator.reservedBytes);
        break;
    }
    await r.check(live);
  }
  done = true;
  for (const ptr of live.splice(0)) allocator.free(ptr);
  for (let st = 0; st < STREAMS; st++) backend.completeStream(st);
  allocator.emptyCache();
  await r.check([]);
  expect(allocator.reservedBytes, 'everything freed and the cache emptied: nothing reserved').to.equal(0);
  expect(backend.reservedBytes).to.equal(0);
}

describe('CachingAllocator under random programs with streams, events, reclaimers, kinds and limits', function () {
  this.timeout(30_000);
  for (const config of configs) {
    it(`keeps invariants, backed and intact live data, and whole-page mappings (${config.name})`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(step, { minLength: 10, maxLength: 80, size: 'max' }), (steps) => runProgram(config, steps)),
        { numRuns: RUNS, seed: SEED },
      );
    });
  }
});

