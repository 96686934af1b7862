import type { Device, DeviceLike } from '../contracts/Device.js';
import { parseDevice } from '../contracts/Device.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkByteCount, checkOptions } from '../validation/validate.js';
import type { BackendEvent, MemoryBackend, PageMapping, StreamId } from '../contracts/MemoryBackend.js';
import type { MemoryBlock } from '../contracts/MemoryBlock.js';

export interface VirtualMemoryBackendOptions {
  /** Default `{ type: 'virtual', index: 0 }`. */
  readonly device?: DeviceLike;
  /** Bytes of "device memory" (malloc'd segments plus mapped pages). Default 2^46 (64 TiB). */
  readonly capacityBytes?: number;
  /** Segment alignment. Default 512 (what cudaMalloc guarantees and more). */
  readonly alignment?: number;
  /** Number of streams, 0 … streams-1. Default 1. */
  readonly streams?: number;
  /** Page size for page mapping; 0 disables it. Default 2 MiB. */
  readonly pageBytes?: number;
  /** Keep written bytes (sparse, 4 KiB pages) so that data round-trips; default true. */
  readonly storeData?: boolean;
}

interface VirtualEvent extends BackendEvent {
  readonly sequence: number;
}

const STORE_PAGE = 4096;

/**
 * A device that hands out address ranges without real memory: for replaying traces that reach tens of GiB,
 * and for testing the caching engine's logic (streams whose work the test holds back, page mapping, capacity)
 * on any machine. Written bytes are kept sparsely, so small data round-trips.
 *
 * Handles are the segment's base address. Addresses are never reused.
 * Invariants: reservedBytes == sum of live malloc'd segments + mapped pages <= capacityBytes;
 * an event completes once its stream's completed sequence reaches it.
 */
export class VirtualMemoryBackend implements MemoryBackend<number> {
  readonly device: Device;
  readonly alignment: number;
  readonly capacityBytes: number;
  readonly defaultStream: StreamId = 0;
  readonly pageMapping: PageMapping<number> | undefined;
  readonly #streams: number;
  readonly #store: Map<number, Uint8Array> | null;
  readonly #recorded: number[];
  readonly #completed: number[];
  readonly #held = new Set<StreamId>();
  #nextAddress = 0x7f00_0000_0000;
  #reservedBytes = 0;
  #peakReservedBytes = 0;
  #mallocs = 0;
  #frees = 0;

  constructor(options: VirtualMemoryBackendOptions = {}) {
    checkOptions('options', options, ['device', 'capacityBytes', 'alignment', 'streams', 'pageBytes', 'storeData']);
    this.device = parseDevice(options.device ?? { type: 'virtual', index: 0 });
    this.alignment = options.alignment ?? 512;
    if (!Number.isSafeInteger(this.alignment) || this.alignment < 1 || (this.alignment & (this.alignment - 1)) !== 0) {
      throw new InvalidArgumentError('alignment', options.alignment, 'a positive power of two');
    }
    this.capacityBytes = checkByteCount('capacityBytes', options.capacityBytes ?? 2 ** 46);
    this.#streams = options.streams ?? 1;
    if (!Number.isSafeInteger(this.#streams) || this.#streams < 1) throw new InvalidArgumentError('streams', options.streams, 'a positive integer');
    this.#recorded = new Array<number>(this.#streams).fill(0);
    this.#completed = new Array<number>(this.#streams).fill(0);
    this.#store = options.storeData === false ? null : new Map();
    const pageBytes = checkByteCount('pageBytes', options.pageBytes ?? 2 << 20);
    this.pageMapping = pageBytes > 0 ? this.#makePageMapping(pageBytes) : undefined;
  }

  /** Bytes currently charged against capacity. */
  get reservedBytes(): number {
    return this.#reservedBytes;
  }

  get peakReservedBytes(): number {
    return this.#peakReservedBytes;
  }

  /** Successful `malloc` and `map` calls. */
  get mallocCount(): number {
    return this.#mallocs;
  }

  /** `free` and `unmap` calls. */
  get freeCount(): number {
    return this.#frees;
  }

  malloc(byteLength: number): MemoryBlock<number> | null {
    if (!this.#charge(byteLength)) return null;
    const address = this.#take(byteLength);
    return { handle: address, byteOffset: 0, address, byteLength };
  }

  free(segment: MemoryBlock<number>): void {
    this.#frees++;
    this.#reservedBytes -= segment.byteLength;
    this.#forget(segment.address, segment.byteLength);
  }

  copy(dst: number, dstOffset: number, src: number, srcOffset: number, byteLength: number): void {
    if (!this.#store) return;
    const bytes = this.#readNow(src + srcOffset, byteLength);
    this.#writeNow(dst + dstOffset, bytes);
  }

  write(dst: number, dstOffset: number, bytes: Uint8Array): void {
    if (this.#store) this.#writeNow(dst + dstOffset, bytes);
  }

  read(src: number, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    return Promise.resolve(this.#readNow(src + srcOffset, byteLength));
  }

  isStream(stream: StreamId): boolean {
    return Number.isSafeInteger(stream) && stream >= 0 && stream < this.#streams;
  }

  recordEvent(stream: StreamId): BackendEvent {
    const sequence = ++this.#recorded[stream]!;
    if (!this.#held.has(stream)) this.#completed[stream] = sequence;
    const event: VirtualEvent = { stream, sequence };
    return event;
  }

  isEventComplete(event: BackendEvent): boolean {
    return this.#completed[event.stream]! >= (event as VirtualEvent).sequence;
  }

  synchronizeEvent(event: BackendEvent): void {
    const e = event as VirtualEvent;
    if (this.#completed[e.stream]! < e.sequence) this.#completed[e.stream] = e.sequence;
  }

  /** Test control: work recorded on `stream` from now on stays incomplete until `completeStream`. */
  holdStream(stream: StreamId): void {
    this.#held.add(stream);
  }

  /** Test control: completes all work recorded on `stream` and stops holding it back. */
  completeStream(stream: StreamId): void {
    this.#held.delete(stream);
    this.#completed[stream] = this.#recorded[stream]!;
  }

  #charge(byteLength: number): boolean {
    if (this.#reservedBytes + byteLength > this.capacityBytes) return false;
    this.#reservedBytes += byteLength;
    if (this.#reservedBytes > this.#peakReservedBytes) this.#peakReservedBytes = this.#reservedBytes;
    this.#mallocs++;
    return true;
  }

  #take(byteLength: number): number {
    const address = this.#nextAddress;
    this.#nextAddress += Math.ceil(Math.max(byteLength, 1) / this.alignment) * this.alignment;
    return address;
  }

  #makePageMapping(pageBytes: number): PageMapping<number> {
    if ((pageBytes & (pageBytes - 1)) !== 0) throw new InvalidArgumentError('pageBytes', pageBytes, 'a power of two');
    return {
      pageBytes,
      reserve: (byteLength) => {
        const start = Math.ceil(this.#nextAddress / pageBytes) * pageBytes;
        this.#nextAddress = start;
        const address = this.#take(byteLength);
        return { handle: address, byteOffset: 0, address, byteLength };
      },
      map: (_range, _offset, byteLength) => this.#charge(byteLength),
      unmap: (range, offset, byteLength) => {
        this.#frees++;
        this.#reservedBytes -= byteLength;
        this.#forget(range.address + offset, byteLength);
      },
      release: () => {},
    };
  }

  #writeNow(address: number, bytes: Uint8Array): void {
    for (let done = 0; done < bytes.byteLength; ) {
      const at = address + done;
      const page = Math.floor(at / STORE_PAGE);
      const within = at - page * STORE_PAGE;
      const n = Math.min(STORE_PAGE - within, bytes.byteLength - done);
      let stored = this.#store!.get(page);
      if (!stored) this.#store!.set(page, (stored = new Uint8Array(STORE_PAGE)));
      stored.set(bytes.subarray(done, done + n), within);
      done += n;
    }
  }

  #readNow(address: number, byteLength: number): Uint8Array {
    const out = new Uint8Array(byteLength);
    if (!this.#store) return out;
    for (let done = 0; done < byteLength; ) {
      const at = address + done;
      const page = Math.floor(at / STORE_PAGE);
      const within = at - page * STORE_PAGE;
      const n = Math.min(STORE_PAGE - within, byteLength - done);
      const stored = this.#store.get(page);
      if (stored) out.set(stored.subarray(within, within + n), done);
      done += n;
    }
    return out;
  }

  #forget(address: number, byteLength: number): void {
    if (!this.#store || this.#store.size === 0) return;
    const first = Math.ceil(address / STORE_PAGE);
    const last = Math.floor((address + byteLength) / STORE_PAGE);
    if (last - first > this.#store.size) {
      for (const page of this.#store.keys()) if (page >= first && page < last) this.#store.delete(page);
    } else {
      for (let page = first; page < last; page++) this.#store.delete(page);
    }
  }
}
