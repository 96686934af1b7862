import type { AllocateOptions, DataPtr, Device, Pager } from '@stowage/core';
import type { MemoryBlock, PageOut } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';
import { checkByteCount } from '@stowage/core/plugin-kit';

/** Bytes of one page of an address-only segment's store. */
const STORE_PAGE = 4096;
/** Segment alignment of the address-only memory: what cudaMalloc guarantees, and the CPU backend's. */
const ALIGNMENT = 512;
/** Where the first segment starts: a device-looking address, so that no address is 0. */
const FIRST_ADDRESS = 0x7f00_0000_0000;

/**
 * One segment of an address-only simulated device: an address range that holds no memory. The bytes written into it
 * through the device (`write`, `copy`, a page-in of written bytes) are kept in pages of 4 KiB, only where written;
 * every other byte reads as zero. A kernel's work is never stored (Note [Address-only memory]).
 */
export class AddressSegment {
  /** Written pages by page index within the segment; a page is zero-filled where not written. */
  readonly #pages = new Map<number, Uint8Array>();

  constructor(
    readonly address: number,
    readonly byteLength: number,
  ) {}

  /** Pages holding written bytes (for tests: a segment never written holds none). */
  get storedPages(): number {
    return this.#pages.size;
  }

  /** True when some byte of `[offset, offset + byteLength)` was written. */
  hasBytes(offset: number, byteLength: number): boolean {
    if (byteLength === 0 || this.#pages.size === 0) return false;
    const first = Math.floor(offset / STORE_PAGE);
    const last = Math.floor((offset + byteLength - 1) / STORE_PAGE);
    for (const page of this.#pages.keys()) if (page >= first && page <= last) return true;
    return false;
  }

  /** The bytes of `[offset, offset + byteLength)`, zeros where nothing was written. */
  read(offset: number, byteLength: number): Uint8Array {
    const out = new Uint8Array(byteLength);
    this.#forPages(offset, byteLength, true, (page, lo, hi) => {
      const stored = this.#pages.get(page);
      if (stored !== undefined) out.set(stored.subarray(lo, hi), page * STORE_PAGE + lo - offset);
    });
    return out;
  }

  /** Stores `bytes` at `offset`. */
  write(offset: number, bytes: Uint8Array): void {
    this.#forPages(offset, bytes.byteLength, false, (page, lo, hi) => {
      let stored = this.#pages.get(page);
      if (stored === undefined) {
        stored = new Uint8Array(STORE_PAGE);
        this.#pages.set(page, stored);
      }
      const from = page * STORE_PAGE + lo - offset;
      stored.set(bytes.subarray(from, from + hi - lo), lo);
    });
  }

  /** Makes `[offset, offset + byteLength)` read as zeros again, dropping the pages it empties. */
  clear(offset: number, byteLength: number): void {
    if (this.#pages.size === 0) return;
    const first = Math.floor(offset / STORE_PAGE);
    const last = Math.floor((offset + Math.max(byteLength, 1) - 1) / STORE_PAGE);
    for (const [page, stored] of [...this.#pages]) {
      if (page < first || page > last) continue;
      const lo = Math.max(offset - page * STORE_PAGE, 0);
      const hi = Math.min(offset + byteLength - page * STORE_PAGE, STORE_PAGE);
      if (lo === 0 && hi === STORE_PAGE) this.#pages.delete(page);
      else stored.fill(0, lo, hi);
    }
  }

  /**
   * Calls `visit(page, lo, hi)` for each page the range touches (each stored page it touches, with `storedOnly`),
   * with the range's part of it, in order.
   */
  #forPages(offset: number, byteLength: number, storedOnly: boolean, visit: (page: number, lo: number, hi: number) => void): void {
    const end = offset + byteLength;
    const first = Math.floor(offset / STORE_PAGE);
    const last = Math.floor((end - 1) / STORE_PAGE);
    const pagesInRange = last - first + 1;
    // A large read of a sparsely written segment visits the stored pages, not every page of the range.
    const pages = byteLength === 0 ? [] : storedOnly && pagesInRange > this.#pages.size ? [...this.#pages.keys()].filter((p) => p >= first && p <= last).sort((a, b) => a - b) : range(first, last);
    for (const page of pages) visit(page, Math.max(offset - page * STORE_PAGE, 0), Math.min(end - page * STORE_PAGE, STORE_PAGE));
  }
}

function range(first: number, last: number): number[] {
  return Array.from({ length: last - first + 1 }, (_, i) => first + i);
}

/**
 * The host copy of a block none of whose bytes were written (Note [Address-only memory]): it reports the block's
 * `byteLength` and reads as that many zeros (`slice`), yet holds no memory, so that a page-out of a 4 GiB
 * activation costs nothing on the machine running the simulation. Only LMS's bookkeeping and the device's pager
 * see it: both read its `byteLength`, and `slice` when a reclaimed storage's bytes are read.
 */
export class ZeroHostCopy extends Uint8Array {
  static get [Symbol.species](): Uint8ArrayConstructor {
    return Uint8Array;
  }

  constructor(byteLength: number) {
    super(0);
    Object.defineProperty(this, 'byteLength', { value: byteLength, enumerable: false });
  }

  /** Zeros, `[start, end)` of the block (whose length is at most 2^32 bytes, a typed array's limit). */
  override slice(start = 0, end: number = this.byteLength): Uint8Array<ArrayBuffer> {
    const lo = clampIndex(start, this.byteLength);
    const hi = clampIndex(end, this.byteLength);
    return new Uint8Array(Math.max(hi - lo, 0));
  }
}

function clampIndex(index: number, length: number): number {
  const i = Math.trunc(index);
  return i < 0 ? Math.max(length + i, 0) : Math.min(i, length);
}

/**
 * The memory of an address-only simulated device (`new SimulatedDevice({ addressOnly: true })`): segments are
 * address ranges (AddressSegment), handed out in increasing order and never reused, charged against
 * `capacityBytes`; copies, writes, reads and the pager act on the bytes the segments store.
 *
 * Note [Address-only memory]: the device keeps addresses and timing, not bytes, so that a 16 GiB device running a
 * 100 GiB working set replays in seconds on a small machine. A byte exists only where something wrote it through
 * the device (`write`, `copy`, a page-in of a host copy that holds bytes), in 4 KiB pages; every other byte reads as
 * zero. A kernel's work (`SimulatedDevice#kernel`'s `run`) cannot reach these bytes: a run on this device checks
 * timing and residency, never the results of its kernels, which the runs with bytes (the default mode) check. A
 * page-out copies the written bytes of its block when it has some (a real array), and otherwise gives a
 * ZeroHostCopy; a page-in stores the host copy's bytes, or clears the block for a ZeroHostCopy. So everything the
 * allocator contract writes and reads round-trips, LMS included.
 *
 * Invariants: reservedBytes == Σ byteLength of live segments ≤ capacityBytes (when given); segments never overlap.
 */
export class AddressMemory {
  readonly alignment = ALIGNMENT;
  readonly capacityBytes: number | undefined;
  readonly pager: Pager;
  #nextAddress = FIRST_ADDRESS;
  #reservedBytes = 0;

  /** @throws InvalidArgumentError for a `capacityBytes` that is not a whole number of bytes */
  constructor(device: Device, options: { readonly capacityBytes?: number | undefined } = {}) {
    this.capacityBytes = options.capacityBytes === undefined ? undefined : checkByteCount('options.capacityBytes', options.capacityBytes);
    this.pager = new AddressPager(device);
  }

  get reservedBytes(): number {
    return this.#reservedBytes;
  }

  /**
   * One kind of segment: device memory has the usage `'storage'` only.
   * @throws InvalidArgumentError for another usage
   */
  segmentKind(options: AllocateOptions): number {
    if (options.usage !== undefined && options.usage !== 'storage') {
      throw new InvalidArgumentError('options.usage', options.usage, "'storage' (or nothing) on an address-only simulated device");
    }
    return 0;
  }

  malloc(byteLength: number): MemoryBlock<AddressSegment> | null {
    if (this.capacityBytes !== undefined && this.#reservedBytes + byteLength > this.capacityBytes) return null;
    const address = this.#nextAddress;
    const advance = Math.ceil(Math.max(byteLength, 1) / ALIGNMENT) * ALIGNMENT;
    if (!Number.isSafeInteger(address + advance)) return null; // the address space is spent: no room, as a device says
    this.#nextAddress += advance;
    this.#reservedBytes += byteLength;
    return { handle: new AddressSegment(address, byteLength), byteOffset: 0, address, byteLength };
  }

  free(segment: MemoryBlock<AddressSegment>): void {
    this.#reservedBytes -= segment.byteLength;
  }

  copy(dst: AddressSegment, dstOffset: number, src: AddressSegment, srcOffset: number, byteLength: number): void {
    if (src.hasBytes(srcOffset, byteLength)) dst.write(dstOffset, src.read(srcOffset, byteLength));
    else dst.clear(dstOffset, byteLength);
  }

  write(dst: AddressSegment, dstOffset: number, bytes: Uint8Array): void {
    dst.write(dstOffset, bytes);
  }

  read(src: AddressSegment, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    return Promise.resolve(src.read(srcOffset, byteLength));
  }
}

/** Pages the blocks of an AddressMemory at once: a ZeroHostCopy for a block never written, its bytes otherwise. */
class AddressPager implements Pager {
  constructor(readonly device: Device) {}

  pageOut(src: DataPtr): PageOut {
    const segment = src.handle as AddressSegment;
    const bytes = segment.hasBytes(src.byteOffset, src.byteLength) ? segment.read(src.byteOffset, src.byteLength) : new ZeroHostCopy(src.byteLength);
    return { byteLength: src.byteLength, bytes, done: Promise.resolve(bytes) };
  }

  pageIn(bytes: Uint8Array, dst: DataPtr): void {
    const segment = dst.handle as AddressSegment;
    if (bytes instanceof ZeroHostCopy) segment.clear(dst.byteOffset, bytes.byteLength);
    else segment.write(dst.byteOffset, bytes);
  }
}
