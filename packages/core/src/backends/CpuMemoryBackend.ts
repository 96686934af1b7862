import type { AllocateOptions } from '../contracts/Allocator.js';
import type { Pager } from '../contracts/Pager.js';
import { CpuPager } from './CpuPager.js';
import type { Device } from '../contracts/Device.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkBoolean, checkByteCount, checkOptions } from '../validation/validate.js';
import type { BackendEvent, MemoryBackend, SegmentOptions, StreamId } from '../contracts/MemoryBackend.js';
import type { MemoryBlock } from '../contracts/MemoryBlock.js';

export type HostBuffer = ArrayBuffer | SharedArrayBuffer;

export interface CpuMemoryBackendOptions {
  /** Default for segments that do not say: SharedArrayBuffer-backed when true. */
  readonly shared?: boolean;
  /**
   * What the host can hold, for tests that run it out of memory: `malloc` returns null past it. Unknown (up to what
   * V8 will allocate) when absent, as in `cpu()`: the allocator's budget is the engine's `memoryLimit` (`limit`).
   */
  readonly capacityBytes?: number;
}

const CPU_ALIGNMENT = 64;
const COMPLETE: BackendEvent = Object.freeze({ stream: 0 });

/**
 * Host memory on ArrayBuffer or SharedArrayBuffer. Addresses are virtual (a bump counter, never reused), so
 * that snapshots and overlap checks have numbers to work with. One immediate stream: every event is complete.
 *
 * Invariants: reservedBytes == sum of byteLength over segments not yet freed; reservedBytes <= capacityBytes when
 * one was given.
 */
export class CpuMemoryBackend implements MemoryBackend<HostBuffer> {
  readonly device: Device = Object.freeze({ type: 'cpu', index: 0 });
  readonly alignment = CPU_ALIGNMENT;
  readonly capacityBytes: number | undefined;
  readonly defaultStream: StreamId = 0;
  /** Copies blocks out to host arrays outside the segments and back (LMS under a budget). */
  readonly pager: Pager = new CpuPager(this.device);
  readonly #shared: boolean;
  #nextAddress = CPU_ALIGNMENT * 1024;
  #reservedBytes = 0;

  /** @throws InvalidArgumentError for a `shared` that is not a boolean, a bad `capacityBytes`, or an unknown key */
  constructor(given: CpuMemoryBackendOptions = {}) {
    const options = checkOptions('options', given, ['shared', 'capacityBytes']);
    this.#shared = checkBoolean('options.shared', options.shared) ?? false;
    this.capacityBytes = options.capacityBytes === undefined ? undefined : checkByteCount('options.capacityBytes', options.capacityBytes);
  }

  get reservedBytes(): number {
    return this.#reservedBytes;
  }

  /**
   * Kind 1: SharedArrayBuffer segments; kind 0: ArrayBuffer. Host memory has one usage, `'storage'` (plain memory);
   * any other is refused, as {@link AllocateOptions} says.
   * @throws InvalidArgumentError for a usage other than `'storage'`, or a `shared` that is not a boolean
   */
  segmentKind(options: AllocateOptions): number {
    const shared = options.shared ?? this.#shared;
    if (typeof shared !== 'boolean') throw new InvalidArgumentError('options.shared', shared, 'true or false');
    if (options.usage !== undefined && options.usage !== 'storage') {
      throw new InvalidArgumentError('options.usage', options.usage, "'storage' (or nothing) on cpu: host memory has no other usages");
    }
    return shared ? 1 : 0;
  }

  malloc(byteLength: number, options: SegmentOptions = {}): MemoryBlock<HostBuffer> | null {
    if (this.capacityBytes !== undefined && this.#reservedBytes + byteLength > this.capacityBytes) return null;
    let handle: HostBuffer;
    try {
      handle = (options.kind ?? (this.#shared ? 1 : 0)) === 1 ? new SharedArrayBuffer(byteLength) : new ArrayBuffer(byteLength);
    } catch (error) {
      if (error instanceof RangeError) return null; // V8: "Array buffer allocation failed" or length too large
      throw error;
    }
    const address = this.#nextAddress;
    this.#nextAddress += Math.ceil(Math.max(byteLength, 1) / CPU_ALIGNMENT) * CPU_ALIGNMENT;
    this.#reservedBytes += byteLength;
    return { handle, byteOffset: 0, address, byteLength };
  }

  free(segment: MemoryBlock<HostBuffer>): void {
    this.#reservedBytes -= segment.byteLength;
    detach(segment.handle);
  }

  copy(dst: HostBuffer, dstOffset: number, src: HostBuffer, srcOffset: number, byteLength: number): void {
    new Uint8Array(dst, dstOffset, byteLength).set(new Uint8Array(src, srcOffset, byteLength));
  }

  write(dst: HostBuffer, dstOffset: number, bytes: Uint8Array): void {
    new Uint8Array(dst, dstOffset, bytes.byteLength).set(bytes);
  }

  read(src: HostBuffer, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(src, srcOffset, byteLength).slice());
  }

  isStream(stream: StreamId): boolean {
    return stream === 0;
  }

  recordEvent(): BackendEvent {
    return COMPLETE;
  }

  isEventComplete(): boolean {
    return true;
  }

  synchronizeEvent(): void {}
}

/**
 * Detaches a freed ArrayBuffer so that a stale view reads zero bytes instead of another tensor's data, and its
 * memory can go back at once. SharedArrayBuffers cannot be detached; other holders keep them alive.
 */
function detach(buffer: HostBuffer): void {
  if (!(buffer instanceof ArrayBuffer) || buffer.byteLength === 0) return;
  const transferable = buffer as ArrayBuffer & { transfer?: (length: number) => ArrayBuffer };
  if (typeof transferable.transfer === 'function') transferable.transfer(0);
  else structuredClone(buffer, { transfer: [buffer] });
}
