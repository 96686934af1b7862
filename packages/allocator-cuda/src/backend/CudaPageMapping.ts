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
}

/** One physical allocation mapped in a range: `count` pages from page `first`, mapped and unmapped whole. */
export interface MappedAllocation {
  readonly handle: CudaMemHandle;
  readonly first: number;
  readonly count: number;
}

/** An address range this mapping reserved: its page size and the physical allocation mapped over each page. */
interface Range {
  readonly pageBytes: number;
  /** `pages[i]`: the allocation mapped over page i, or null when page i is unmapped. */
  readonly pages: (MappedAllocation | null)[];
}

/**
 * Expandable segments on the CUDA virtual memory management API, as PyTorch maps them: a segment is an address range
 * reserved once (cuMemAddressReserve) with a page size of its own, a multiple of the driver's granularity (2 MiB);
 * growing it creates physical allocations of one page or more each (cuMemCreate), maps each at its place (cuMemMap)
 * and grants the device read-write access to the whole growth at once (cuMemSetAccess); shrinking unmaps allocations
 * and releases them, and their memory goes back to the device. The driver maps an allocation only whole and only from
 * its start (a part, or a non-zero offset into it, is CUDA_ERROR_NOT_SUPPORTED on a real driver), so an allocation
 * is also the least that can be given back. Physical allocations are created exportable as POSIX file descriptors
 * (unless `shareable: false`), so that a block of an expandable segment can be sent to another process
 * (`allocationsUnder`, Note [Sharing expandable segments] in CudaIpc.ts).
 *
 * Invariants: `#ranges.get(base).pages[i]` is the allocation mapped over page i of the range at `base`, or null when
 * page i is unmapped; an allocation covers pages `first` … `first + count - 1` and no other; only mapped
 * allocations count against the device.
 */
export class CudaPageMapping implements PageMapping<bigint> {
  /** The driver's allocation granularity: the least page size of a range. */
  readonly pageBytes: number;
  /** Pages are exportable as POSIX file descriptors. */
  readonly shareable: boolean;
  readonly #device: CudaPageMappingDevice;
  readonly #ranges = new Map<bigint, Range>();

  constructor(device: CudaPageMappingDevice, options: CudaPageMappingOptions = {}) {
    this.#device = device;
    this.shareable = options.shareable ?? true;
    device.enter();
    this.pageBytes = device.driver.memGetAllocationGranularity(device.cuDevice);
  }

  /** @throws InvalidArgumentError when `pageBytes` is not a multiple of the granularity, or `byteLength` of it */
  reserve(byteLength: number, pageBytes = this.pageBytes): MemoryBlock<bigint> | null {
    if (!Number.isSafeInteger(pageBytes) || pageBytes <= 0 || pageBytes % this.pageBytes !== 0) {
      throw new InvalidArgumentError('pageBytes', pageBytes, `a multiple of the driver's allocation granularity (${this.pageBytes} bytes)`);
    }
    if (!Number.isSafeInteger(byteLength) || byteLength <= 0 || byteLength % pageBytes !== 0) {
      throw new InvalidArgumentError('byteLength', byteLength, `a positive multiple of the page size (${pageBytes} bytes)`);
    }
    this.#device.enter();
    let base: bigint;
    try {
      base = this.#device.driver.memAddressReserve(byteLength, this.pageBytes);
    } catch (error) {
      if (isCudaError(error, 'CUDA_ERROR_OUT_OF_MEMORY')) return null;
      throw error;
    }
    this.#ranges.set(base, { pageBytes, pages: new Array<MappedAllocation | null>(byteLength / pageBytes).fill(null) });
    return { handle: base, byteOffset: 0, address: Number(base), byteLength };
  }

  map(range: MemoryBlock<bigint>, offset: number, byteLength: number, allocationBytes?: number): boolean {
    const { driver, cuDevice } = this.#device;
    this.#device.enter();
    const { pageBytes, pages } = this.#rangeOf(range);
    const bytes = allocationBytes ?? pageBytes;
    const first = offset / pageBytes;
    const perAllocation = bytes / pageBytes;
    const created: MappedAllocation[] = [];
    try {
      for (let at = first; at < first + byteLength / pageBytes; at += perAllocation) {
        const handle = driver.memCreate(bytes, cuDevice, { shareable: this.shareable });
        try {
          driver.memMap(range.handle + BigInt(at * pageBytes), bytes, handle, 0);
        } catch (error) {
          driver.memRelease(handle);
          throw error;
        }
        const allocation = { handle, first: at, count: perAllocation };
        created.push(allocation);
        pages.fill(allocation, at, at + perAllocation);
      }
      driver.memSetAccess(range.handle + BigInt(offset), byteLength, cuDevice);
      return true;
    } catch (error) {
      // Nothing stays mapped from a failed call: the engine counts the whole range as unmapped.
      for (const allocation of created) this.#unmapAllocation(range.handle, pageBytes, pages, allocation);
      if (isCudaError(error, 'CUDA_ERROR_OUT_OF_MEMORY')) return false;
      throw error;
    }
  }

  /** @throws Error when `[offset, offset + byteLength)` would cut an allocation (the engine unmaps only whole ones) */
  unmap(range: MemoryBlock<bigint>, offset: number, byteLength: number): void {
    this.#device.enter();
    const { pageBytes, pages } = this.#rangeOf(range);
    const first = offset / pageBytes;
    const end = first + byteLength / pageBytes;
    for (let i = first; i < end; ) {
      const allocation = pages[i];
      if (allocation === null || allocation === undefined) {
        i++;
        continue;
      }
      if (allocation.first < first || allocation.first + allocation.count > end) {
        throw new Error(`unmapping pages ${first}..${end - 1} of the range at 0x${range.handle.toString(16)} would cut the allocation over pages ${allocation.first}..${allocation.first + allocation.count - 1}`);
      }
      this.#unmapAllocation(range.handle, pageBytes, pages, allocation);
      i = allocation.first + allocation.count;
    }
  }

  release(range: MemoryBlock<bigint>): void {
    this.#device.enter();
    this.#device.driver.memAddressFree(range.handle, range.byteLength);
    this.#ranges.delete(range.handle);
  }

  /** True when `base` is the start of an address range this mapping reserved (an expandable segment's). */
  holds(base: bigint): boolean {
    return this.#ranges.has(base);
  }

  /**
   * The physical allocations under `[offset, offset + byteLength)` of the range at `base`, first to last, with the
   * offset of the first one's start in the range and each one's bytes.
   * @throws Error when part of that range is unmapped
   */
  allocationsUnder(base: bigint, offset: number, byteLength: number): { readonly start: number; readonly handles: CudaMemHandle[]; readonly bytes: number[] } {
    const range = this.#ranges.get(base);
    if (range === undefined) throw new Error(`no address range reserved at 0x${base.toString(16)}`);
    const { pageBytes, pages } = range;
    const first = Math.floor(offset / pageBytes);
    const last = Math.floor((offset + Math.max(1, byteLength) - 1) / pageBytes);
    const handles: CudaMemHandle[] = [];
    const bytes: number[] = [];
    let start = -1;
    for (let i = first; i <= last; ) {
      const allocation = pages[i];
      if (allocation === null || allocation === undefined) throw new Error(`page ${i} of the range at 0x${base.toString(16)} is not mapped`);
      if (start < 0) start = allocation.first * pageBytes;
      handles.push(allocation.handle);
      bytes.push(allocation.count * pageBytes);
      i = allocation.first + allocation.count;
    }
    return { start, handles, bytes };
  }

  #rangeOf(range: MemoryBlock<bigint>): Range {
    const found = this.#ranges.get(range.handle);
    if (found === undefined) throw new Error(`no address range reserved at 0x${range.handle.toString(16)}`);
    return found;
  }

  #unmapAllocation(base: bigint, pageBytes: number, pages: (MappedAllocation | null)[], allocation: MappedAllocation): void {
    const { driver } = this.#device;
    driver.memUnmap(base + BigInt(allocation.first * pageBytes), allocation.count * pageBytes);
    driver.memRelease(allocation.handle);
    pages.fill(null, allocation.first, allocation.first + allocation.count);
  }
}
