import { expect } from 'chai';
import type { CachingAllocatorOptions, DataPtr, Plugin } from '@stowage/core';
import { CachingAllocator, OutOfMemoryError } from '@stowage/core';
import { StorageHooks } from '@stowage/core/plugin-kit';
import { VirtualMemoryBackend } from '@stowage/core/testing';

export const KiB = 1 << 10;
export const MiB = 1 << 20;

/** A caching engine over a virtual device (no real memory), with the backend for inspection. */
export function engine(
  options: CachingAllocatorOptions = { preset: 'pytorch' },
  device: { streams?: number; capacityBytes?: number; pageBytes?: number } = {},
): { allocator: CachingAllocator<number>; backend: VirtualMemoryBackend } {
  const backend = new VirtualMemoryBackend({ storeData: false, ...device });
  return { allocator: new CachingAllocator(backend, options), backend };
}

/** The snapshot block at a pointer's address. */
export function blockOf(allocator: CachingAllocator<number>, ptr: DataPtr) {
  for (const segment of allocator.snapshot().segments) {
    const block = segment.blocks.find((b) => b.address === ptr.address);
    if (block) return { segment, block };
  }
  throw new Error(`no block at 0x${ptr.address.toString(16)}`);
}

/** A step of a random program against the engine that every property test shares. */
export type EngineStep =
  | { kind: 'alloc'; bytes: number; stream: number }
  | { kind: 'free'; pick: number }
  | { kind: 'recordStream'; pick: number; stream: number }
  | { kind: 'hold'; stream: number }
  | { kind: 'complete'; stream: number }
  | { kind: 'emptyCache' }
  | { kind: 'trim'; target: number };

/**
 * Applies `step`, keeping `live` (the caller's live pointers) current. An allocation may run out of memory;
 * `trim` must return the reserved bytes. Returns the pointer a `free` released.
 */
export function applyEngineStep(
  allocator: CachingAllocator<number>,
  backend: VirtualMemoryBackend,
  live: DataPtr[],
  step: EngineStep,
): DataPtr | undefined {
  switch (step.kind) {
    case 'alloc':
      try {
        live.push(allocator.allocate(step.bytes, { stream: step.stream }));
      } catch (error) {
        expect(error).to.be.instanceOf(OutOfMemoryError);
      }
      return undefined;
    case 'free': {
      if (live.length === 0) return undefined;
      const ptr = live.splice(step.pick % live.length, 1)[0]!;
      allocator.free(ptr);
      return ptr;
    }
    case 'recordStream':
      if (live.length > 0) allocator.recordStream(live[step.pick % live.length]!, step.stream);
      return undefined;
    case 'hold':
      backend.holdStream(step.stream);
      return undefined;
    case 'complete':
      backend.completeStream(step.stream);
      return undefined;
    case 'emptyCache':
      allocator.emptyCache();
      return undefined;
    case 'trim':
      expect(allocator.trim(step.target)).to.equal(allocator.reservedBytes);
      return undefined;
  }
}

/**
 * A snapshot lists every reserved byte once, as PyTorch's does: its entries' sizes add up to the reserved bytes,
 * each entry's blocks tile `[address, address + total_size)` in order, entries do not overlap, and there is an
 * entry for each counted segment (an expandable segment has one per mapped range, so possibly more).
 */
export function expectSnapshotCoversReserved(allocator: CachingAllocator<number>): void {
  const segments = allocator.snapshot().segments;
  const stats = allocator.memoryStats();
  expect(segments.reduce((n, s) => n + s.total_size, 0), 'the entries add up to the reserved bytes').to.equal(allocator.reservedBytes);
  expect(segments.reduce((n, s) => n + s.allocated_size, 0), 'the entries add up to the allocated bytes').to.equal(stats['allocated_bytes.all.current']);
  let end = -1;
  for (const s of segments) {
    expect(s.address, 'entries are sorted and disjoint').to.be.at.least(end);
    let at = s.address;
    for (const b of s.blocks) {
      expect(b.address, `the blocks of the entry at 0x${s.address.toString(16)} tile it`).to.equal(at);
      at += b.size;
    }
    expect(at, `the blocks of the entry at 0x${s.address.toString(16)} end at its total size`).to.equal(s.address + s.total_size);
    end = at;
  }
  const whole = segments.filter((s) => !s.is_expandable).length;
  if (whole === segments.length) expect(whole, 'one entry per segment').to.equal(stats['segment.all.current']);
  else expect(segments.length, 'at least one entry per segment').to.be.at.least(stats['segment.all.current']);
}

/** The engine with its protected `retireSegment` reachable, as a backend-specific allocator has it. */
export class RetiringAllocator extends CachingAllocator<number> {
  retire(handle: number): boolean {
    return this.retireSegment(handle);
  }
}

/** Live pointers never overlap. */
export function expectDisjoint(ptrs: readonly DataPtr[]): void {
  const ranges = ptrs.filter((p) => !p.isReleased && p.byteLength > 0).map((p) => [p.address, p.address + p.byteLength] as const);
  ranges.sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < ranges.length; i++) expect(ranges[i]![0], 'overlapping allocations').to.be.at.least(ranges[i - 1]![1]);
}

/** What `fn` threw, or undefined. */
export function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** A plugin registering one storage hook. */
export function storageHooks(hooks: StorageHooks): Plugin {
  return { name: 'hooks', register: (c) => void c.register(StorageHooks, { useValue: hooks }) };
}
