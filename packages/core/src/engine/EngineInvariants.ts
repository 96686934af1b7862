/**
 * The engine's invariant check (`CachingAllocator#assertInvariants`): a full recount, O(blocks), for tests.
 *
 * - Walks every segment's blocks: links, tiling from the segment's address, mapped bytes, gaps listed and merged.
 * - Classifies each block as allocated, pending free, quick-listed, retired or pooled, and checks that pooled
 *   blocks are in their pool and never neighbours.
 * - Recounts reserved, allocated, active and requested bytes and compares them with the statistics.
 * - Checks the pools, quick lists and expandable-segment slots hold exactly the blocks and segments found.
 */
import type { Block } from './Block.js';
import type { EngineState } from './EngineState.js';
import { isPooledFree } from './EngineState.js';
import type { ExpandableSegments } from './ExpandableSegments.js';
import type { QuickLists } from './QuickLists.js';

/** Checks the invariants listed on CachingAllocator against a recount of the shared state. */
export class EngineInvariants<H> {
  constructor(
    private readonly state: EngineState<H>,
    private readonly quick: QuickLists<H>,
    private readonly expandable: ExpandableSegments<H>,
  ) {}

  /** Throws an Error that names the first invariant broken. */
  check(): void {
    const fail = (what: string): never => {
      throw new Error(`CachingAllocator invariant broken: ${what}`);
    };
    const state = this.state;
    let reserved = 0;
    let allocated = 0;
    let active = 0;
    let requested = 0;
    let freeBlocks = 0;
    let quickBlocks = 0;
    for (const segment of state.segments) {
      reserved += segment.mappedBytes;
      let expected = segment.address;
      let mapped = 0;
      let prev: Block<H> | null = null;
      for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) {
        if (b.prev !== prev) fail(`block at 0x${b.address.toString(16)} has a wrong prev link`);
        if (b.address !== expected) fail(`block at 0x${b.address.toString(16)} should start at 0x${expected.toString(16)}`);
        if (b.segment !== segment) fail(`block at 0x${b.address.toString(16)} names another segment`);
        expected += b.size;
        if (!b.mapped) {
          if (!segment.gaps.has(b)) fail(`the gap at 0x${b.address.toString(16)} is not listed`);
          if (prev && !prev.mapped) fail(`gaps at 0x${prev.address.toString(16)} and 0x${b.address.toString(16)} did not merge`);
        } else if (b.allocated) {
          mapped += b.size;
          allocated += b.size;
          active += b.size;
          requested += b.requestedSize;
        } else if (b.eventCount > 0) {
          mapped += b.size;
          active += b.size;
          requested += b.requestedSize;
        } else if (b.quick) {
          mapped += b.size;
          quickBlocks++;
        } else if (segment.retired) {
          mapped += b.size; // out of service, in no pool (Note [Retired segments] in CachingAllocator.ts)
        } else {
          mapped += b.size;
          freeBlocks++;
          if (prev && isPooledFree(prev)) fail(`free blocks at 0x${prev.address.toString(16)} and 0x${b.address.toString(16)} did not merge`);
          if (!state.poolOf(b).has(b)) fail(`free block at 0x${b.address.toString(16)} is not in its pool`);
        }
        prev = b;
      }
      if (segment.retired) {
        let busy = false;
        for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) busy ||= b.allocated || b.eventCount > 0;
        if (!busy) fail(`the retired segment at 0x${segment.address.toString(16)} has nothing in use but was not returned`);
      }
      if (segment.extentBytes > 0 && segment.tail !== prev) fail(`the segment at 0x${segment.address.toString(16)} has a stale tail`);
      if (expected !== segment.address + segment.extentBytes) fail(`the blocks of the segment at 0x${segment.address.toString(16)} do not add up to its ${segment.extentBytes} bytes`);
      if (mapped !== segment.mappedBytes) fail(`the segment at 0x${segment.address.toString(16)} maps ${segment.mappedBytes} bytes but its mapped blocks add up to ${mapped}`);
    }
    const pooled = state.allPools().reduce((n, pool) => n + pool.size, 0);
    if (freeBlocks !== pooled) fail(`${freeBlocks} free blocks in segments but ${pooled} in pools`);
    const listed = this.quick.count;
    if (quickBlocks !== listed) fail(`${quickBlocks} quick-listed blocks in segments but ${listed} in quick lists`);
    const s = state.stats;
    if (s.reserved_bytes.all.current !== reserved) fail(`reserved_bytes ${s.reserved_bytes.all.current} != recount ${reserved}`);
    if (s.allocated_bytes.all.current !== allocated) fail(`allocated_bytes ${s.allocated_bytes.all.current} != recount ${allocated}`);
    if (s.active_bytes.all.current !== active) fail(`active_bytes ${s.active_bytes.all.current} != recount ${active}`);
    if (s.requested_bytes.all.current !== requested) fail(`requested_bytes ${s.requested_bytes.all.current} != recount ${requested}`);
    if (s.segment.all.current !== state.segments.size) fail(`segment count ${s.segment.all.current} != ${state.segments.size} segments`);
    for (const [key, segment] of this.expandable.entries()) {
      if (!state.segments.has(segment)) fail(`the expandable segment for ${key} was returned`);
    }
    for (const segment of state.segments) {
      if (segment.expandable && !segment.retired && !this.expandable.isListed(segment)) {
        fail(`the expandable segment at 0x${segment.address.toString(16)} is not listed`);
      }
    }
  }
}
