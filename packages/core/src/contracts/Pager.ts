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
}

export const Pager: Token<Pager> = Symbol('stowage.Pager');
