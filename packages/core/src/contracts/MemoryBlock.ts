/**
 * A contiguous range of device memory as a backend or a minimal allocator hands it out: the handle to reach
 * it, where it starts inside that handle, its (possibly virtual) address and its size.
 */
export interface MemoryBlock<H = unknown> {
  readonly handle: H;
  readonly byteOffset: number;
  readonly address: number;
  /** Size of the block; at least the bytes requested (allocators round up). */
  readonly byteLength: number;
}
