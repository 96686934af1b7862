import type { StreamId } from './MemoryBackend.js';

/**
 * Where one live allocation sits in the caching engine's segments: what freeing it would give back. LMS policies
 * read it to choose victims (IBM's reclaim counts a block together with the free blocks beside it).
 */
export interface BlockPlacement {
  /** The block's address (blocks of a segment are contiguous: one's address + size is the next one's address). */
  readonly address: number;
  /** The block's size (the request rounded up). */
  readonly size: number;
  /** The address of the segment holding it: blocks of one segment share it. */
  readonly segment: number;
  /** The segment's size (mapped bytes of an expandable segment). */
  readonly segmentBytes: number;
  /** Free bytes right before the block, contiguous with it in its segment (they merge with it when it is freed). */
  readonly freeBefore: number;
  /** Free bytes right after it, likewise. */
  readonly freeAfter: number;
  /** True for the small pool; a freed block serves only requests of its own pool, kind and stream. */
  readonly small: boolean;
  /** The backend's segment kind (WebGPU usage, CPU shared or not). */
  readonly kind: number;
  readonly stream: StreamId;
}
