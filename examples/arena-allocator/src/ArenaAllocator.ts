import type { Allocator, Device, MinimalAllocator } from '@stowage/core';
import type { MemoryBlock, SegmentSink, SnapshotBlock, SnapshotSegment } from '@stowage/core/plugin-kit';
import { InvalidArgumentError, makeAllocator, parseBytes } from '@stowage/core';

export interface ArenaAllocatorOptions {
  /** Bytes in the arena, as a number or text (`'64MiB'`). Default 64 MiB. */
  readonly capacity?: number | string;
  /** Block alignment, a power of two. Default 256. */
  readonly alignment?: number;
  /** The device this arena serves. Default `{ type: 'arena', index: 0 }`. */
  readonly device?: Device;
}

/** A free range of the arena, in bytes from its start. */
interface Range {
  offset: number;
  size: number;
}

/**
 * A fixed host arena carved by first fit over an address-ordered free list; frees coalesce with both
 * neighbours. The arena is reserved up front, so reserved bytes are its capacity.
 *
 * Invariants: free ranges are sorted by offset, disjoint and never adjacent (adjacent ones are merged);
 * free sizes + live sizes == capacity.
 */
class Arena implements MinimalAllocator<ArrayBuffer> {
  readonly device: Device;
  readonly alignment: number;
  readonly capacityBytes: number;
  readonly settings: Readonly<Record<string, unknown>>;
  readonly #buffer: ArrayBuffer;
  readonly #free: Range[];
  /** Live blocks by offset: their size and the bytes requested. */
  readonly #live = new Map<number, { size: number; requested: number }>();
  /** Address of byte 0: 1 MiB up, or the alignment when that is larger, so addresses honour the alignment. */
  readonly #base: number;

  constructor(capacityBytes: number, alignment: number, device: Device) {
    this.device = device;
    this.alignment = alignment;
    this.capacityBytes = capacityBytes;
    this.settings = { kind: 'arena', capacity: capacityBytes, alignment };
    this.#base = Math.ceil(0x10_0000 / alignment) * alignment;
    try {
      this.#buffer = new ArrayBuffer(capacityBytes);
    } catch (error) {
      throw new InvalidArgumentError('capacity', capacityBytes, `a size this host can allocate at once (${(error as Error).message})`);
    }
    this.#free = capacityBytes > 0 ? [{ offset: 0, size: capacityBytes }] : [];
  }

  allocate(nbytes: number): MemoryBlock<ArrayBuffer> | null {
    const size = Math.ceil(Math.max(nbytes, 1) / this.alignment) * this.alignment;
    const index = this.#free.findIndex((r) => r.size >= size);
    if (index < 0) return null;
    const range = this.#free[index]!;
    const offset = range.offset;
    if (range.size === size) this.#free.splice(index, 1);
    else {
      range.offset += size;
      range.size -= size;
    }
    this.#live.set(offset, { size, requested: nbytes });
    return { handle: this.#buffer, byteOffset: offset, address: this.#base + offset, byteLength: size };
  }

  free(block: MemoryBlock<ArrayBuffer>): void {
    const offset = block.byteOffset;
    const size = block.byteLength;
    this.#live.delete(offset);
    let i = this.#free.findIndex((r) => r.offset > offset);
    if (i < 0) i = this.#free.length;
    this.#free.splice(i, 0, { offset, size });
    const next = this.#free[i + 1];
    if (next && offset + size === next.offset) {
      this.#free[i]!.size += next.size;
      this.#free.splice(i + 1, 1);
    }
    const prev = this.#free[i - 1];
    if (prev && prev.offset + prev.size === offset) {
      prev.size += this.#free[i]!.size;
      this.#free.splice(i, 1);
    }
  }

  copy(dst: ArrayBuffer, dstOffset: number, src: ArrayBuffer, srcOffset: number, byteLength: number): void {
    new Uint8Array(dst, dstOffset, byteLength).set(new Uint8Array(src, srcOffset, byteLength));
  }

  write(dst: ArrayBuffer, dstOffset: number, bytes: Uint8Array): void {
    new Uint8Array(dst, dstOffset, bytes.byteLength).set(bytes);
  }

  async read(src: ArrayBuffer, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    return new Uint8Array(src, srcOffset, byteLength).slice();
  }

  bindSegments(sink: SegmentSink): void {
    if (this.capacityBytes > 0) sink.reserved({ address: this.#base, byteLength: this.capacityBytes });
  }

  snapshotSegments(): SnapshotSegment[] {
    const blocks: SnapshotBlock[] = [
      ...[...this.#live].map(([offset, b]) => ({
        address: this.#base + offset,
        size: b.size,
        requested_size: b.requested,
        state: 'active_allocated' as const,
        frames: [],
      })),
      ...this.#free.map((r) => ({ address: this.#base + r.offset, size: r.size, requested_size: 0, state: 'inactive' as const, frames: [] })),
    ].sort((a, b) => a.address - b.address);
    const allocated = [...this.#live.values()].reduce((s, b) => s + b.size, 0);
    return [
      {
        device: this.device.index,
        address: this.#base,
        total_size: this.capacityBytes,
        allocated_size: allocated,
        active_size: allocated,
        requested_size: [...this.#live.values()].reduce((s, b) => s + b.requested, 0),
        stream: 0,
        segment_type: 'large',
        segment_pool_id: [0, 0],
        is_expandable: false,
        frames: [],
        blocks,
      },
    ];
  }

  /** Free ranges, for tests: `[offset, size]` pairs in address order. */
  freeRanges(): [number, number][] {
    return this.#free.map((r) => [r.offset, r.size]);
  }
}

/**
 * Makes an arena allocator. The Allocator contract (validation, double-free detection, statistics, events,
 * out-of-memory errors) comes from `makeAllocator`; the arena supplies only placement.
 * @throws InvalidArgumentError for a capacity that is not a byte count or an alignment that is not a power of two
 */
export function createArenaAllocator(options: ArenaAllocatorOptions = {}): Allocator & { readonly arena: { freeRanges(): [number, number][] } } {
  const capacity = parseBytes(options.capacity ?? 64 * 2 ** 20);
  if (capacity === undefined) throw new InvalidArgumentError('capacity', options.capacity, "a byte count such as 67108864 or '64MiB'");
  const alignment = options.alignment ?? 256;
  const arena = new Arena(capacity, alignment, options.device ?? { type: 'arena', index: 0 });
  return Object.assign(makeAllocator(arena), { arena });
}
