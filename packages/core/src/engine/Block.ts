import type { DataPtr } from '../storage/DataPtr.js';
import type { MemoryBlock } from '../contracts/MemoryBlock.js';
import type { StreamId } from '../contracts/MemoryBackend.js';
import { BlockPool } from './BlockPool.js';
import { PageRuns } from './PageRuns.js';
import type { BlockPlacement } from '../contracts/BlockPlacement.js';
import type { SnapshotFrame } from '../contracts/MemorySnapshot.js';

/** One segment from the backend (or one expandable address range) and the blocks that tile it. */
export class Segment<H = unknown> {
  /** The first block (lowest address); blocks chain through `next`. */
  head!: Block<H>;
  /** The last block. */
  tail!: Block<H>;
  /** Blocks tile `[address, address + extentBytes)`: the whole segment, or an expandable one's used prefix. */
  extentBytes: number;
  /** Bytes the backend currently backs: extentBytes minus the unmapped gaps of an expandable segment. */
  mappedBytes: number;
  /** The unmapped blocks of an expandable segment by (size, address) (Note [Expandable segments]). */
  readonly gaps: BlockPool<H>;
  /** Out of service (Note [Retired segments] in CachingAllocator.ts): its free blocks are in no pool. */
  retired = false;
  /** Where it was reserved (first mapped), when history with stacks was on; PyTorch's context_when_segment_allocated. */
  frames: SnapshotFrame[] | null = null;
  /** Bytes per page of an expandable segment (Note [Expandable segments]); 0 when fixed. */
  pageBytes = 0;
  /** The backend allocations mapped in an expandable segment (Note [Page runs]); null when fixed. */
  readonly runs: PageRuns | null;

  constructor(
    readonly memory: MemoryBlock<H>,
    readonly stream: StreamId,
    /** The backend's segment kind (Note [Segment kinds] in CachingAllocator.ts). */
    readonly kind: number,
    readonly small: boolean,
    readonly expandable: boolean,
  ) {
    this.mappedBytes = expandable ? 0 : memory.byteLength;
    this.runs = expandable ? new PageRuns() : null;
    this.extentBytes = this.mappedBytes;
    this.gaps = new BlockPool<H>(false);
  }

  get address(): number {
    return this.memory.address;
  }
}

/**
 * A range of a segment: allocated to a caller, waiting for other streams' work (pending free), or free in a
 * pool. Neighbours in the segment link through prev/next.
 *
 * Invariants: prev.address + prev.size == address (same for next); a free block is in exactly one pool tree
 * and never has a free neighbour it could merge with (eventCount == 0 and no stream uses).
 */
export class Block<H = unknown> {
  prev: Block<H> | null = null;
  next: Block<H> | null = null;
  allocated = false;
  /** Bytes the caller asked for while allocated; 0 otherwise. */
  requestedSize = 0;
  /** Events recorded on other streams that must complete before this block returns to the pool. */
  eventCount = 0;
  /** Streams other than `stream` that used this block while it was allocated. */
  streamUses: Set<StreamId> | null = null;
  /** The pool's free-block search count when this block entered the pool (garbage collection age). */
  gcCountBase = 0;
  /** The live pointer while allocated. */
  ptr: DataPtr<H> | null = null;
  /** False for an unmapped gap of an expandable segment. */
  mapped = true;
  /** True while the block waits, unmerged, in a quick list (Note [Deferred coalescing] in QuickLists.ts). */
  quick = false;
  /** True once the block went back to the device (released by emptyCache, trim or dispose). */
  released = false;
  /**
   * Where it was allocated, while allocated or pending free, when history with stacks was on; null otherwise.
   * PyTorch's context_when_allocated, which a snapshot lists as the block's frames.
   */
  frames: SnapshotFrame[] | null = null;

  constructor(
    readonly segment: Segment<H>,
    public address: number,
    public size: number,
  ) {}

  get stream(): StreamId {
    return this.segment.stream;
  }

  get small(): boolean {
    return this.segment.small;
  }

  /** True when the block is one of several in its segment. */
  get isSplit(): boolean {
    return this.prev !== null || this.next !== null;
  }

  /** Byte offset of this block inside the segment's backend handle. */
  get handleOffset(): number {
    return this.segment.memory.byteOffset + (this.address - this.segment.memory.address);
  }
}

/**
 * Where `block` sits in its segment: its size, and the free bytes contiguous with it on either side (free blocks,
 * pooled, held in a quick list or waiting on an event: all merge with it once it is freed and the events complete).
 */
export function placementOf<H>(block: Block<H>): BlockPlacement {
  let freeBefore = 0;
  for (let b = block.prev; b !== null && !b.allocated && b.mapped; b = b.prev) freeBefore += b.size;
  let freeAfter = 0;
  for (let b = block.next; b !== null && !b.allocated && b.mapped; b = b.next) freeAfter += b.size;
  const segment = block.segment;
  return {
    address: block.address,
    size: block.size,
    segment: segment.address,
    segmentBytes: segment.mappedBytes,
    freeBefore,
    freeAfter,
    small: segment.small,
    kind: segment.kind,
    stream: segment.stream,
  };
}
