import { expect } from 'chai';
import type { Allocator } from '../contracts/Allocator.js';
import type { DataPtr } from '../storage/DataPtr.js';

/**
 * Checks what must hold of any allocator between calls, given the pointers the caller holds live:
 * no two live blocks overlap; the allocation count equals a recount and requested bytes are at least the live
 * pointers' (exactly, unless frees wait for device work); requested <= active; allocated >= requested;
 * reserved >= allocated; every peak >= its current; `all` == small_pool + large_pool.
 */
export function assertAllocatorInvariants(allocator: Allocator, live: readonly DataPtr[]): void {
  const sorted = live.filter((p) => p.byteLength > 0).sort((a, b) => a.address - b.address);
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1]!;
    const next = sorted[i]!;
    expect(prev.address + prev.byteLength, `the block at 0x${prev.address.toString(16)} overlaps the block at 0x${next.address.toString(16)}`).to.be.at.most(next.address);
  }
  for (const ptr of live) expect(ptr.isReleased, 'a live pointer is not released').to.equal(false);
  const s = allocator.memoryStats();
  const requested = live.reduce((sum, p) => sum + p.byteLength, 0);
  expect(s['allocation.all.current'], 'allocation.all.current vs live pointers').to.equal(live.length);
  // Exact for most allocators; one whose frees wait for device work (CUDA streams, WebGPU submits) keeps a freed
  // block's bytes requested until that work is done, as PyTorch counts them.
  expect(s['requested_bytes.all.current'], 'requested_bytes.all.current vs recount').to.be.at.least(requested);
  expect(s['requested_bytes.all.current'], 'requested_bytes.all.current vs active bytes').to.be.at.most(s['active_bytes.all.current'] || s['allocated_bytes.all.current']);
  expect(s['allocated_bytes.all.current'], 'allocated_bytes >= requested_bytes').to.be.at.least(requested);
  expect(s['reserved_bytes.all.current'], 'reserved_bytes >= allocated_bytes').to.be.at.least(s['allocated_bytes.all.current']);
  for (const name of ['allocation', 'allocated_bytes', 'reserved_bytes', 'requested_bytes', 'segment'] as const) {
    expect(s[`${name}.all.peak`], `${name}.all.peak >= current`).to.be.at.least(s[`${name}.all.current`]);
    expect(s[`${name}.all.current`], `${name}: all == small_pool + large_pool`).to.equal(
      s[`${name}.small_pool.current`] + s[`${name}.large_pool.current`],
    );
    expect(s[`${name}.all.current`], `${name}.all.current == allocated - freed`).to.equal(s[`${name}.all.allocated`] - s[`${name}.all.freed`]);
  }
}
