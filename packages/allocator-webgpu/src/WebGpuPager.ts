import type { DataPtr, Device, Pager } from '@stowage/core';
import type { PageOut, PagingRoom } from '@stowage/core/plugin-kit';
import type { StagedRead, WebGpuMemoryBackend } from './WebGpuMemoryBackend.js';

/** A page-out in flight on the queue; `bytes` is set when the staging buffer's mapAsync resolves. */
class WebGpuPageOut implements PageOut {
  bytes: Uint8Array | null = null;
  readonly done: Promise<Uint8Array>;
  readonly #read: StagedRead;

  constructor(
    readonly byteLength: number,
    read: StagedRead,
  ) {
    this.#read = read;
    this.done = read.bytes.then((bytes) => (this.bytes = bytes));
    this.done.catch(() => {}); // a failure is the awaiting caller's to see, never an unhandled rejection
  }

  /** Destroys the staging buffer of a copy still in flight, giving its room in the budget back now. */
  cancel(): void {
    if (this.bytes === null) this.#read.cancel();
  }
}

/**
 * LMS paging for WebGPU (Note [Paging in device order] in core's Pager). A page-out records a `copyBufferToBuffer`
 * from the block into a pooled MAP_READ staging buffer and submits it before returning; the bytes reach the host
 * when the staging buffer maps. The block may be freed at once: any later use of it is submitted after the copy. A
 * page-in is a `queue.writeBuffer` of the host bytes, which the queue runs before any work submitted after it.
 * The staging buffer is device memory inside the budget (Note [One budget] in DeviceBudget.ts): a page-out
 * whose staging buffer would pass it is refused (null).
 */
export class WebGpuPager implements Pager {
  constructor(private readonly backend: WebGpuMemoryBackend) {}

  get device(): Device {
    return this.backend.device;
  }

  pageOut(src: DataPtr): PageOut | null {
    // pageOutRead records and submits the copy synchronously, before its first await.
    const read = this.backend.pageOutRead(src.handle as GPUBuffer, src.byteOffset, src.byteLength);
    return read === null ? null : new WebGpuPageOut(src.byteLength, read);
  }

  pageIn(bytes: Uint8Array, dst: DataPtr): void {
    this.backend.write(dst.handle as GPUBuffer, dst.byteOffset, bytes);
  }

  /** Keeps the backend's paging reserve out of its segments' reach from now on (Note [One budget]). */
  enablePaging(): void {
    this.backend.budget.enablePaging();
  }

  /** The staging bytes in flight, the paging reserve and the segments' headroom (Note [Paging room] in core's Pager). */
  pagingRoom(): PagingRoom {
    return this.backend.budget.pagingRoom();
  }
}
