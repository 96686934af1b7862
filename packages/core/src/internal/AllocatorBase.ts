import type { AllocateOptions, Allocator, AllocatorEventSource } from '../contracts/Allocator.js';
import type { AllocatorStats } from '../contracts/AllocatorStats.js';
import { DataPtr, type Deleter } from '../storage/DataPtr.js';
import type { Device } from '../contracts/Device.js';
import { formatDevice, isSameDevice } from '../contracts/Device.js';
import { DeviceMismatchError } from '../errors/DeviceMismatchError.js';
import { DisposedError } from '../errors/DisposedError.js';
import { DoubleFreeError } from '../errors/DoubleFreeError.js';
import { ForeignPointerError } from '../errors/ForeignPointerError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';
import type { MemorySnapshot } from '../contracts/MemorySnapshot.js';
import { markAllocatorDeleter } from './allocatorDeleters.js';
import { SafeEmitter } from './SafeEmitter.js';
import { StatsBook } from './StatsBook.js';
import { checkByteCount, checkBytes, checkRange } from '../validation/validate.js';

/** Copies and host transfers on a device's handles (a MemoryBackend or a MinimalAllocator provides them). */
export interface Transfers<H> {
  copy(dst: H, dstOffset: number, src: H, srcOffset: number, byteLength: number): void;
  write(dst: H, dstOffset: number, bytes: Uint8Array): void;
  read(src: H, srcOffset: number, byteLength: number): Promise<Uint8Array>;
}

/**
 * What every allocator in core shares: argument validation, pointer ownership through one bound deleter,
 * double-free and use-after-release detection, the event emitter, statistics, copies and host transfers, and
 * idempotent disposal. Subclasses place and free memory (`allocate`, `releaseAllocation`).
 */
/**
 * Throws for `allocator.free(ptr)` on a pointer a live storage holds (Note [One holder per pointer] in DataPtr.ts):
 * freeing it would leave the storage reporting memory live that was freed. Nothing changes.
 */
export function throwHeld(ptr: DataPtr): never {
  throw new InvalidArgumentError('ptr', ptr, `a pointer no live storage holds: the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)} belongs to a live storage; release the storage instead`);
}

export abstract class AllocatorBase<H> implements Allocator {
  readonly device: Device;
  readonly alignment: number;
  protected readonly emitter = new SafeEmitter();
  protected readonly stats = new StatsBook();
  /** The deleter of every pointer this allocator owns; its context is the subclass's allocation record. */
  protected readonly deleter: Deleter = markAllocatorDeleter((context) => this.releaseAllocation(context));
  readonly #transfers: Transfers<H>;
  #disposed = false;

  constructor(device: Device, alignment: number, transfers: Transfers<H>) {
    if (!Number.isSafeInteger(alignment) || alignment < 1 || (alignment & (alignment - 1)) !== 0) {
      throw new InvalidArgumentError('alignment', alignment, 'a power of two');
    }
    this.device = device;
    this.alignment = alignment;
    this.#transfers = transfers;
  }

  get events(): AllocatorEventSource {
    return this.emitter;
  }

  protected get isDisposed(): boolean {
    return this.#disposed;
  }

  abstract allocate(nbytes: number, options?: AllocateOptions): DataPtr;
  abstract snapshot(): MemorySnapshot;
  abstract emptyCache(): void;
  /** Frees the allocation behind a pointer's context; called once per pointer, by its release. */
  protected abstract releaseAllocation(context: unknown): void;
  /** Returns every resource to the device; called once, by the first `dispose()`. */
  protected abstract disposeResources(): void;

  /** Whether this allocator made `ptr` (false for anything that is not a DataPtr). */
  owns(ptr: DataPtr): boolean {
    return ptr instanceof DataPtr && ptr.deleter === this.deleter;
  }

  free(ptr: DataPtr): void {
    this.checkOpen('free');
    this.checkPtr('ptr', ptr, true);
    ptr.release();
  }

  copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset = 0, srcOffset = 0): void {
    this.checkOpen('copyData');
    this.checkPtr('dst', dst);
    this.checkPtr('src', src);
    checkByteCount('nbytes', nbytes);
    checkByteCount('dstOffset', dstOffset);
    checkByteCount('srcOffset', srcOffset);
    checkRange('nbytes', dstOffset, nbytes, dst.byteLength, 'destination');
    checkRange('nbytes', srcOffset, nbytes, src.byteLength, 'source');
    if (nbytes === 0) return;
    this.#transfers.copy(dst.handle as H, dst.byteOffset + dstOffset, src.handle as H, src.byteOffset + srcOffset, nbytes);
  }

  writeBytes(dst: DataPtr, bytes: Uint8Array, dstOffset = 0): void {
    this.checkOpen('writeBytes');
    this.checkPtr('dst', dst);
    const data = checkBytes('bytes', bytes);
    checkByteCount('dstOffset', dstOffset);
    checkRange('bytes.byteLength', dstOffset, data.byteLength, dst.byteLength, 'destination');
    if (data.byteLength === 0) return;
    this.#transfers.write(dst.handle as H, dst.byteOffset + dstOffset, data);
  }

  async readBytes(src: DataPtr, srcOffset = 0, byteLength?: number): Promise<Uint8Array> {
    this.checkOpen('readBytes');
    this.checkPtr('src', src);
    checkByteCount('srcOffset', srcOffset);
    const length = byteLength === undefined ? Math.max(0, src.byteLength - srcOffset) : checkByteCount('byteLength', byteLength);
    checkRange('byteLength', srcOffset, length, src.byteLength, 'source');
    if (length === 0) return new Uint8Array(0);
    return this.#transfers.read(src.handle as H, src.byteOffset + srcOffset, length);
  }

  memoryStats(): AllocatorStats {
    this.checkOpen('memoryStats');
    return this.stats.toRecord();
  }

  resetPeakStats(): void {
    this.checkOpen('resetPeakStats');
    this.stats.resetPeak();
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.disposeResources();
    this.emitter.removeAllListeners();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  protected checkOpen(method: string): void {
    if (this.#disposed) throw new DisposedError(`Cannot call ${method}() on the ${formatDevice(this.device)} allocator: it was disposed.`);
  }

  /** Checks that `ptr` is a live DataPtr on this allocator's device; with `owned`, that this allocator owns it. */
  protected checkPtr(argument: string, ptr: DataPtr, owned = false): void {
    // One test on the hot path, the messages out of it (Note [Few large functions on the hot path] in
    // CachingAllocator.ts: V8 optimizes a short function sooner).
    if (!(ptr instanceof DataPtr) || ptr.isReleased || !isSameDevice(ptr.device, this.device) || (owned && (ptr.deleter !== this.deleter || ptr.holder !== null))) {
      this.#throwBadPointer(argument, ptr, owned);
    }
  }

  /** Throws the error for a pointer that checkPtr refused. */
  #throwBadPointer(argument: string, ptr: DataPtr, owned: boolean): never {
    if (!(ptr instanceof DataPtr)) throw new InvalidArgumentError(argument, ptr, 'a DataPtr');
    if (ptr.isReleased) {
      const what = `the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)}`;
      if (owned) throw new DoubleFreeError(`Cannot free ${what}: it was already released.`);
      throw new UseAfterReleaseError(`${argument} is ${what}, which was already released.`);
    }
    if (owned && ptr.holder !== null && ptr.deleter === this.deleter) throwHeld(ptr);
    if (!isSameDevice(ptr.device, this.device)) {
      throw new DeviceMismatchError(`${argument} lives on ${formatDevice(ptr.device)}, but this allocator serves ${formatDevice(this.device)}.`);
    }
    throw new ForeignPointerError(
      `Cannot free the allocation at 0x${ptr.address.toString(16)}: this ${formatDevice(this.device)} allocator did not allocate it, or COW/IPC now owns it (release it through its storage instead).`,
    );
  }

}
