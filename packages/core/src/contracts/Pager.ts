import type { DataPtr } from '../storage/DataPtr.js';
import type { Device } from './Device.js';
import type { Token } from './Token.js';

/** A block's bytes held in host memory while its device memory is reclaimed. */
export interface PagedData {
  readonly byteLength: number;
  readonly bytes: Uint8Array;
}

/**
 * The LMS service-provider interface an allocator offers: move a block's bytes to host memory and back,
 * asynchronously where the device allows it, without blocking the JavaScript thread.
 */
export interface Pager {
  readonly device: Device;
  /** Copies `src` to host memory. The caller frees the device memory once this resolves. */
  pageOut(src: DataPtr): Promise<PagedData>;
  /** Copies paged bytes back into `dst`, which has at least `paged.byteLength` bytes. */
  pageIn(paged: PagedData, dst: DataPtr): Promise<void>;
}

export const Pager: Token<Pager> = Symbol('stowage.Pager');
