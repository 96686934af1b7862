/**
 * Fixed segments: one backend `malloc` per segment, sized when it is reserved, freed whole.
 *
 * - A request no cached block fits gets a segment of PyTorch's size for it (2 MiB, 20 MiB, or the request
 *   rounded to 2 MiB: SizeClass.ts), or of the custom `segmentSize` the options give.
 * - A custom size is at least the request and, for a request under the max split size, under the max split size.
 * - A segment that does not fit the memory limit or the device falls back to PyTorch's size, then to the request
 *   itself, before the engine gives up on a new segment. Under a budget, PyTorch's size falls back to the room the
 *   budget has left (Note [Segments under a budget]).
 * - A segment goes back only whole (SegmentRelease), counted out of reserved bytes and segments as it came in.
 */
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import type { MemoryBlock } from '../contracts/MemoryBlock.js';
import { Block, Segment } from './Block.js';
import type { ResolvedCachingOptions } from './CachingAllocatorOptions.js';
import type { EngineState, Request } from './EngineState.js';
import { LARGE_ROUNDING_BYTES, MIN_BLOCK_BYTES, segmentSize } from './SizeClass.js';

/** Reserves and frees the engine's fixed segments. Stateless beyond the shared EngineState. */
export class FixedSegments<H> {
  constructor(private readonly state: EngineState<H>) {}

  /** A new segment's one free block for `r`, in no pool; undefined when the limit or the device has no room. */
  reserve(r: Request<H>): Block<H> | undefined {
    const state = this.state;
    const sized = state.options.segmentSize;
    let bytes = sized ? this.#customSegmentBytes(sized, r.size, r.kind) : segmentSize(r.size);
    let memory = this.#mallocWithinLimit(bytes, r);
    if (memory === null && sized && bytes > segmentSize(r.size)) {
      // A large custom segment did not fit what is left: PyTorch's smaller size may.
      bytes = segmentSize(r.size);
      memory = this.#mallocWithinLimit(bytes, r);
    }
    if (memory === null && sized && bytes > r.size) {
      // Nor PyTorch's, rounded up to 2 MiB: a segment of just the request may still fit a budget that is not a
      // multiple of 2 MiB.
      bytes = r.size;
      memory = this.#mallocWithinLimit(bytes, r);
    }
    if (memory === null) return undefined;
    return this.#adopt(memory, bytes, r);
  }

  /**
   * A segment of the room the budget has left, for a request that fits it when PyTorch's size for it does not
   * (Note [Segments under a budget]); undefined without a budget, with a custom `segmentSize` (whose own fallback
   * already ends at the request), or when the request does not fit either.
   */
  reserveInRoom(r: Request<H>): Block<H> | undefined {
    const state = this.state;
    const room = state.allowedBytes - state.reservedBytes; // Infinity without a budget
    if (!Number.isFinite(room) || state.options.segmentSize || room < r.size || room >= segmentSize(r.size)) return undefined;
    const bytes = Math.max(r.size, room - (room % MIN_BLOCK_BYTES));
    const memory = this.#mallocWithinLimit(bytes, r);
    return memory === null ? undefined : this.#adopt(memory, bytes, r);
  }

  /** A new segment over `memory`: its one free block, in no pool, counted and recorded. */
  #adopt(memory: MemoryBlock<H>, bytes: number, r: Request<H>): Block<H> {
    const state = this.state;
    const segment = new Segment<H>(memory, r.stream, r.kind, r.pool.small, false);
    const block = new Block<H>(segment, memory.address, bytes);
    segment.head = block;
    segment.tail = block;
    state.segments.add(segment);
    this.#count(segment, bytes, 1);
    const history = state.history;
    if (history !== null) {
      const frames = history.record('segment_alloc', memory.address, bytes, r.stream);
      if (history.stacks) segment.frames = frames;
    }
    return block;
  }

  /** Frees a fixed segment the caller already took out of `segments` and the pools, and counts it out. */
  free(segment: Segment<H>): void {
    const bytes = segment.mappedBytes;
    this.state.backend.free(segment.memory);
    this.state.history?.record('segment_free', segment.address, bytes, segment.stream);
    segment.mappedBytes = 0;
    segment.extentBytes = 0;
    this.#count(segment, bytes, -1);
  }

  /**
   * The bytes of a custom-sized segment for a request of `size`: at least the request, and for a request under the
   * max split size less than it. A segment at or above the max split size would leave the request an oversize
   * remainder that no request under the max split size may take (maySplitFor) and that, split, is never
   * released: every such request would then reserve a segment of its own. The cap is the largest multiple of
   * 2 MiB under the max split size, as PyTorch's 20 MiB segments are always under its max split size.
   */
  #customSegmentBytes(sized: NonNullable<ResolvedCachingOptions['segmentSize']>, size: number, kind: number): number {
    const bytes = Math.max(size, this.#checkedSegmentSize(sized(size, this.state.reservedBytes, { kind, kindReservedBytes: this.#kindReservedBytes(kind) })));
    const maxSplit = this.state.options.maxSplitSize;
    if (size >= maxSplit || bytes < maxSplit) return bytes;
    return Math.max(size, Math.ceil(maxSplit / LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES - LARGE_ROUNDING_BYTES);
  }

  /**
   * Bytes reserved in segments of `kind`: a walk over the segments, made only when a custom-sized segment is about
   * to be reserved (a few dozen segments, against the thousands of allocations between two reservations).
   */
  #kindReservedBytes(kind: number): number {
    let bytes = 0;
    for (const segment of this.state.segments) if (segment.kind === kind) bytes += segment.mappedBytes;
    return bytes;
  }

  /** What a custom `segmentSize` returned, when it is a whole byte count. @throws InvalidArgumentError otherwise */
  #checkedSegmentSize(bytes: number): number {
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new InvalidArgumentError('options.segmentSize', bytes, 'a function returning a whole byte count');
    return bytes;
  }

  /*
   * Note [Segments under a budget]
   * PyTorch sizes segments by the request alone (2 MiB for a small one, 20 MiB up to 10 MiB), and so does the
   * engine; PyTorch has no budget to fit them into. Under a budget (the plugin's `limit`) that rule alone would
   * refuse a 64-byte storage under 1 MiB and any 1–10 MiB storage under 20 MiB, although the bytes fit. So when
   * the cache is released and PyTorch's size still does not fit the room the budget has left, but the request
   * does, the segment takes that room (whole 512-byte blocks, at least the request), before any reclaimer (LMS)
   * runs: later requests split it as they would a full-size segment. It is the last resort, not the first, so that
   * a budget with cached segments to release still gets full-size segments. Without a budget nothing changes (the
   * device's own refusal is final, as PyTorch's is), so replays keep PyTorch's figures.
   */
  #mallocWithinLimit(bytes: number, r: Request<H>): MemoryBlock<H> | null {
    if (this.state.reservedBytes + bytes > this.state.allowedBytes) return null;
    return this.state.backend.malloc(bytes, { stream: r.stream, kind: r.kind });
  }

  #count(segment: Segment<H>, bytes: number, sign: 1 | -1): void {
    const s = this.state.stats;
    s.segment.add(segment.small, sign);
    s.reserved_bytes.add(segment.small, sign * bytes);
    if (sign > 0) s.num_device_alloc++;
    else s.num_device_free++;
    if (bytes >= this.state.options.maxSplitSize) s.oversize_segments.add(sign);
    this.state.queueSegmentEvent(sign > 0, segment.address, bytes);
  }
}
