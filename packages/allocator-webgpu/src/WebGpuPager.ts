import type { DataPtr, Device, PagedData, Pager } from '@stowage/core';
import type { WebGpuAllocator } from './WebGpuAllocator.js';

/**
 * LMS paging for WebGPU: page-out copies a block to a readback buffer, maps it and keeps the bytes in host
 * memory; page-in writes them back through the queue. Both are asynchronous and never block the thread.
 */
export class WebGpuPager implements Pager {
  constructor(private readonly allocator: WebGpuAllocator) {}

  get device(): Device {
    return this.allocator.device;
  }

  async pageOut(src: DataPtr): Promise<PagedData> {
    const bytes = await this.allocator.readBytes(src);
    return { byteLength: bytes.byteLength, bytes };
  }

  async pageIn(paged: PagedData, dst: DataPtr): Promise<void> {
    this.allocator.writeBytes(dst, paged.bytes);
  }
}
