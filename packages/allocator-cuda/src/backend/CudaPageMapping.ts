import type { MemoryBlock, PageMapping } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';
import type { CudaDriver, CudaMemHandle } from '../driver/CudaDriver.js';
import { isCudaError } from '../driver/CudaError.js';

/** What the page mapping needs of its backend. */
export interface CudaPageMappingDevice {
  readonly driver: CudaDriver;
  readonly cuDevice: number;
  /** Makes the device's context current. */
  enter(): void;
}

export interface CudaPageMappingOptions {
  /**
   * Create each page's physical allocation exportable as a POSIX file descriptor, so that blocks of expandable
   * segments can be sent to another process (Note [Sharing expandable segments] in CudaIpc.ts). Default true.
   */
  readonly shareable?: boolean;
  /**
   * Bytes per page: each is one physical allocation, mapped and returned whole. A multiple of the driver's
   * granularity (2 MiB); default the granularity. Larger pages make fewer driver calls and return memory in larger
   * pieces (PyTorch's expandable segments map 20 MiB at a time in the large pool).
   */
  readonly pageBytes?: number;
}

/**
 * Expandable segments on the CUDA virtual memory management API, as PyTorch maps them: a segment is an address range
 * reserved once (cuMemAddressReserve); growing it creates one physical allocation per page (cuMemCreate, the
 * driver's granularity, 2 MiB), maps it at its place (cuMemMap) and grants the device read-write access
 * (cuMemSetAccess); shrinking unmaps pages and releases their allocations, whose memory goes back to the device.
 * Physical allocations are created exportable as POSIX file descriptors (unless `shareable: false`), so that a block
 * of an expandable segment can be sent to another process (`pagesOf`, Note [Sharing expandable segments] in
 * CudaIpc.ts).
 *
 * Invariants: `#pages.get(range.handle)[i]` is the physical allocation mapped at page i of the range, or null when
 * page i is unmapped; only mapped pages count against the device.
 */
export class CudaPageMapping implements PageMapping<bigint> {
  readonly pageBytes: number;
  /** Pages are exportable as POSIX file descriptors. */
  readonly shareable: boolean;
  readonly #device: CudaPageMappingDevice;
  readonly #pages = new Map<bigint, (CudaMemHandle | null)[]>();

  constructor(device: CudaPageMappingDevice, options: CudaPageMappingOptions = {}) {
    this.#device = device;
    this.shareable = options.shareable ?? true;
    device.enter();
    const granularity = device.driver.memGetAllocationGranularity(device.cuDevice);
    const pageBytes = options.pageBytes ?? granularity;
    if (!Number.isSafeInteger(pageBytes) || pageBytes <= 0 || pageBytes % granularity !== 0 || (pageBytes & (pageBytes - 1)) !== 0) {
      throw new InvalidArgumentError('pageBytes', pageBytes, `a power-of-two multiple of the driver's allocation granularity (${granularity} bytes)`);
    }
    this.pageBytes = pageBytes;
  }

  reserve(byteLength: number): MemoryBlock<bigint> | null {
    this.#device.enter();
    let base: bigint;
    try {
      base = this.#device.driver.memAddressReserve(byteLength, this.pageBytes);
    } catch (error) {
      if (isCudaError(error, 'CUDA_ERROR_OUT_OF_MEMORY')) return null;
      throw error;
    }
    this.#pages.set(base, new Array<CudaMemHandle | null>(Math.ceil(byteLength / this.pageBytes)).fill(null));
    return { handle: base, byteOffset: 0, address: Number(base), byteLength };
  }

  map(range: MemoryBlock<bigint>, offset: number, byteLength: number): boolean {
    const { driver, cuDevice } = this.#device;
    this.#device.enter();
    const pages = this.#pagesOf(range);
    const first = offset / this.pageBytes;
    const count = byteLength / this.pageBytes;
    let mapped = 0;
    try {
      for (; mapped < count; mapped++) {
        const at = range.handle + BigInt(offset + mapped * this.pageBytes);
        const handle = driver.memCreate(this.pageBytes, cuDevice, { shareable: this.shareable });
        try {
          driver.memMap(at, this.pageBytes, handle, 0);
        } catch (error) {
          driver.memRelease(handle);
          throw error;
        }
        pages[first + mapped] = handle;
      }
      driver.memSetAccess(range.handle + BigInt(offset), byteLength, cuDevice);
      return true;
    } catch (error) {
      // Nothing stays mapped from a failed call: the engine counts the whole range as unmapped.
      this.#unmapPages(range, pages, first, mapped);
      if (isCudaError(error, 'CUDA_ERROR_OUT_OF_MEMORY')) return false;
      throw error;
    }
  }

  unmap(range: MemoryBlock<bigint>, offset: number, byteLength: number): void {
    this.#device.enter();
    this.#unmapPages(range, this.#pagesOf(range), offset / this.pageBytes, byteLength / this.pageBytes);
  }

  release(range: MemoryBlock<bigint>): void {
    this.#device.enter();
    this.#device.driver.memAddressFree(range.handle, range.byteLength);
    this.#pages.delete(range.handle);
  }

  /** True when `base` is the start of an address range this mapping reserved (an expandable segment's). */
  holds(base: bigint): boolean {
    return this.#pages.has(base);
  }

  /** The physical allocations mapped at pages `first` … `first + count - 1` of the range at `base`. */
  pagesOf(base: bigint, first: number, count: number): CudaMemHandle[] {
    const pages = this.#pages.get(base);
    const handles = pages?.slice(first, first + count) ?? [];
    if (handles.length !== count || handles.some((h) => h === null)) throw new Error(`pages ${first}..${first + count - 1} of the range at 0x${base.toString(16)} are not all mapped`);
    return handles as CudaMemHandle[];
  }

  #pagesOf(range: MemoryBlock<bigint>): (CudaMemHandle | null)[] {
    const pages = this.#pages.get(range.handle);
    if (pages === undefined) throw new Error(`no address range reserved at 0x${range.handle.toString(16)}`);
    return pages;
  }

  #unmapPages(range: MemoryBlock<bigint>, pages: (CudaMemHandle | null)[], first: number, count: number): void {
    const { driver } = this.#device;
    for (let i = first; i < first + count; i++) {
      const handle = pages[i];
      if (handle === null || handle === undefined) continue;
      driver.memUnmap(range.handle + BigInt(i * this.pageBytes), this.pageBytes);
      driver.memRelease(handle);
      pages[i] = null;
    }
  }
}
