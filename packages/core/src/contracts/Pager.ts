import type { DataPtr } from '../storage/DataPtr.js';
import type { Device } from './Device.js';
import type { Token } from './Token.js';

/**
 * A page-out under way or done: the bytes of one block on their way to host memory.
 *
 * Invariants: once `bytes` is non-null it never changes; `done` resolves with the same array.
 */
export interface PageOut {
  readonly byteLength: number;
  /** The bytes once they are in host memory; null while the copy is in flight. */
  readonly bytes: Uint8Array | null;
  /** Resolves with the bytes once they are in host memory; rejects when the device failed the copy or it was cancelled. */
  readonly done: Promise<Uint8Array>;
  /**
   * Gives up a copy still in flight whose bytes nobody wants any more (the storage was released or rewritten):
   * device memory the copy holds until it lands (WebGPU's staging buffer) goes back at once, and `done` rejects.
   * Does nothing once the bytes are on the host. Optional: a device whose page-outs hold nothing need not offer it.
   */
  cancel?(): void;
}

/**
 * The LMS service-provider interface a device offers (a device service under the `Pager` token): move a block's bytes to host memory and
 * back without blocking the JavaScript thread.
 *
 * Note [Paging in device order]: both calls enqueue their copy in the device's order and return at once. Work the
 * caller orders after `pageOut(src)` (a later allocation reusing `src`'s block and writing it, a kernel) runs after
 * the copy has read the block, so the caller may free `src` immediately: reclaim happens inside a synchronous
 * allocation, which cannot wait. Work ordered after `pageIn(bytes, dst)` sees the bytes. On the CPU both copies are
 * done before they return. On WebGPU a page-out is a `copyBufferToBuffer` into a mappable staging buffer, submitted
 * at once, whose bytes reach the host when `mapAsync` resolves (`PageOut.bytes` is null until then); a page-in is a
 * `queue.writeBuffer` of host bytes, so it can start only once those bytes are on the host.
 */
export interface Pager {
  readonly device: Device;
  /**
   * Enqueues a copy of `src`'s bytes to host memory and returns at once; `src` may be freed right after. Null when
   * the device has no room for the copy now and enqueued nothing (WebGPU: its staging buffer would pass the
   * device's budget): the caller keeps `src` and may try another block.
   */
  pageOut(src: DataPtr): PageOut | null;
  /** Enqueues a copy of host `bytes` into `dst` (which has at least `bytes.byteLength` bytes). */
  pageIn(bytes: Uint8Array, dst: DataPtr): void;
  /**
   * Called once by a residency service (LMS) that will page this device's blocks, before its first page-out. A
   * device whose page-outs hold device memory until they land (WebGPU staging) sets part of its budget aside for
   * them from then on. Optional: devices that page into host memory at once need nothing.
   */
  enablePaging?(): void;
  /**
   * What page-outs in flight hold of the device's memory now, and the room left beside them (Note [Paging room]),
   * for a residency service that decides whether to wait for them before the next allocations. Optional: without
   * it a residency service cannot tell what page-outs in flight hold, and LMS waits for all of them around each
   * `pinAsync`, as it must on a device where they may hold room.
   */
  pagingRoom?(): PagingRoom;
}

/**
 * Note [Paging room]: a device whose page-outs hold device memory until their bytes land (WebGPU: a staging buffer
 * per page-out, inside the device's budget) keeps `reserveBytes` of its budget for them, and its allocations get
 * the rest. While `inFlightBytes` stays within the reserve, the allocations have all of their share; past it they
 * lose what the page-outs hold beyond it until those land. So a residency service about to allocate `n` bytes, or
 * to page in that much, needs no page-out to land first when `n <= headroomBytes` (it fits without reclaiming
 * anything), or when `inFlightBytes + (n - headroomBytes) <= reserveBytes`: the reclaims for the rest page out at
 * most that much, every such copy fits in the reserve beside those in flight, and each block they free is room for
 * the allocations again. Past the reserve a reclaim that copies frees no room until its copy lands (its block's
 * bytes move into staging), so only waiting for page-outs in flight gives room back.
 */
export interface PagingRoom {
  /** Device bytes held by transfers to the host in flight now (WebGPU: staging buffers not yet mapped and given back). */
  readonly inFlightBytes: number;
  /** Bytes of the device's memory kept for page-outs in flight (0 when none is kept). */
  readonly reserveBytes: number;
  /**
   * Bytes a new allocation may take now without reclaiming anything, beside the transfers in flight and the
   * reserve (idle pooled staging counted as room: it is given back on demand); Infinity without a budget.
   */
  readonly headroomBytes: number;
}

export const Pager: Token<Pager> = Symbol('stowage.Pager');
