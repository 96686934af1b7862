import type { AllocateOptions, AllocatorStats, CachingAllocatorOptions, DeviceError } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';
import { CachingAllocator, DataPtr, DeviceMismatchError, ForwardingAllocator, formatDevice, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import { isSameDevice } from '@stowage/core/plugin-kit';
import type { WebGpuMemoryBackend } from './WebGpuMemoryBackend.js';
import type { WebGpuPager } from './WebGpuPager.js';
import { BufferUsage } from './WebGpuUsage.js';

/** The context of a pointer over a caller's GPUBuffer: Stowage never frees it. */
const IMPORTED = Symbol('imported GPUBuffer');

/** What a caller's buffer must allow to hold a tensor: copies in and out, and storage bindings (the byte-copy kernel). */
const IMPORT_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

export interface ImportOptions {
  /** Start of the range inside the buffer. Default 0; a multiple of 4. */
  readonly byteOffset?: number;
  /** Length of the range. Default: the rest of the buffer. */
  readonly byteLength?: number;
}

/**
 * The WebGPU allocator: the caching engine over a WebGpuMemoryBackend (its upstream, `engine`), with the device's
 * services beside it. Tensors are (GPUBuffer, offset, size) binding ranges carved from large buffers, frees wait
 * for the next submit (Note [Submit epochs]), and `flush()` waits until released segments are really freed.
 * Beside the engine: `importBuffer` (a caller's buffer as a pointer Stowage never frees), `bindingOf`, `flush`,
 * `pager` (LMS, the backend's WebGpuPager), and device-error reports: a lost device or a rejected segment is reported as a `deviceError`
 * event naming the live pointers affected; after a loss every allocation throws DeviceError.
 *
 * Copies and writes check that every pointer's buffer belongs to this allocator's GPUDevice (two runtimes' devices
 * are both `webgpu:0`): a GPUBuffer of another GPUDevice is a DeviceMismatchError, not a copy the device drops.
 */
export class WebGpuAllocator extends ForwardingAllocator {
  /** The caching engine that places and caches this allocator's memory. */
  readonly engine: CachingAllocator<GPUBuffer>;
  readonly backend: WebGpuMemoryBackend;
  /** The deleter of imported pointers: releasing one only forgets it. */
  readonly #forget: Deleter = () => {};

  /** @throws InvalidArgumentError for a bad engine option */
  constructor(backend: WebGpuMemoryBackend, options: CachingAllocatorOptions = {}) {
    const engine = new CachingAllocator<GPUBuffer>(backend, options);
    super(engine);
    this.engine = engine;
    this.backend = backend;
  }

  /** Moves blocks to host memory and back (the device's Pager service, for LMS). */
  get pager(): WebGpuPager {
    return this.backend.pager;
  }

  /**
   * Straight to the engine (which is disposed with this allocator, so it refuses after dispose): this allocator
   * adopts no pointers, and the hot path pays for no layer between them.
   * @throws DeviceError after the device was lost; otherwise as the engine's `allocate`
   */
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr<GPUBuffer> {
    const lost = this.backend.lostError;
    if (lost) throw lost;
    return this.engine.allocate(nbytes, options);
  }

  /** Frees a pointer the engine allocated, or forgets one `importBuffer` returned (its buffer is untouched). */
  override free(ptr: DataPtr): void {
    if (ptr instanceof DataPtr && ptr.deleter === this.#forget) {
      this.checkOpen('free');
      ptr.release();
      return;
    }
    this.engine.free(ptr);
  }

  override copyData(dst: DataPtr, src: DataPtr, nbytes: number, dstOffset?: number, srcOffset?: number): void {
    this.#checkBuffer('dst', dst);
    this.#checkBuffer('src', src);
    super.copyData(dst, src, nbytes, dstOffset, srcOffset);
  }

  override writeBytes(dst: DataPtr, bytes: Uint8Array, dstOffset?: number): void {
    this.#checkBuffer('dst', dst);
    super.writeBytes(dst, bytes, dstOffset);
  }

  override async readBytes(src: DataPtr, srcOffset?: number, byteLength?: number): Promise<Uint8Array> {
    this.#checkBuffer('src', src);
    return super.readBytes(src, srcOffset, byteLength);
  }

  /**
   * Wraps a caller's GPUBuffer (or a range of it) as a pointer without copying. Stowage never frees or destroys
   * it; releasing the pointer (`free(ptr)`, `ptr.release()`) only forgets it. Wrap it in a storage with
   * `runtime.adopt(ptr)`. The pointer is not the engine's: `owns(ptr)` is false, so COW copies it rather than
   * sharing it.
   * @throws InvalidArgumentError for a buffer without STORAGE, COPY_SRC and COPY_DST usage (a mappable buffer, say:
   * copy into a buffer of the program's own), options that are not an object, a range outside the buffer's whole
   * 4-byte words or an offset not 4-byte aligned; DisposedError after dispose; DeviceError after the device was lost
   */
  importBuffer(buffer: GPUBuffer, options: ImportOptions = {}): DataPtr<GPUBuffer> {
    this.checkOpen('importBuffer');
    const lost = this.backend.lostError;
    if (lost) throw lost;
    if (typeof buffer !== 'object' || buffer === null || typeof (buffer as GPUBuffer).size !== 'number') {
      throw new InvalidArgumentError('buffer', buffer, 'a GPUBuffer of this device');
    }
    if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', options, 'an options object (or nothing)');
    if (((buffer.usage ?? 0) & IMPORT_USAGE) !== IMPORT_USAGE) {
      throw new InvalidArgumentError(
        'buffer.usage',
        `0x${(buffer.usage ?? 0).toString(16)}`,
        'a buffer with STORAGE | COPY_SRC | COPY_DST usage: Stowage copies into and out of it and binds it as storage (copy a mappable buffer into such a buffer instead)',
      );
    }
    const byteOffset = options.byteOffset ?? 0;
    const byteLength = options.byteLength ?? buffer.size - byteOffset;
    if (!Number.isSafeInteger(byteOffset) || byteOffset < 0 || byteOffset % 4 !== 0) {
      throw new InvalidArgumentError('options.byteOffset', byteOffset, 'a non-negative multiple of 4');
    }
    // Copies move whole 4-byte words and may not pass the buffer's end: a last partial word cannot be copied.
    const copyable = Math.floor(buffer.size / 4) * 4;
    if (!Number.isSafeInteger(byteLength) || byteLength < 0 || byteOffset + byteLength > copyable) {
      const tail = copyable < buffer.size ? ` (WebGPU copies whole 4-byte words, so the last ${buffer.size - copyable} of its ${buffer.size} bytes cannot be read or written)` : '';
      throw new InvalidArgumentError('options.byteLength', byteLength, `a length within the buffer's first ${copyable} bytes from offset ${byteOffset}${tail}`);
    }
    this.backend.adoptBuffer(buffer);
    return new DataPtr<GPUBuffer>({
      device: this.device,
      byteLength,
      handle: buffer,
      byteOffset,
      address: this.backend.takeAddress(byteLength),
      context: IMPORTED,
      deleter: this.#forget,
    });
  }

  /** True for a pointer made by `importBuffer`. */
  isImported(ptr: DataPtr): boolean {
    return ptr.context === IMPORTED && isSameDevice(ptr.device, this.device);
  }

  /**
   * The binding range of a pointer, for a bind group entry. @throws InvalidArgumentError for a value that is not a
   * DataPtr, or one larger than the device's maxStorageBufferBindingSize (bind a slice instead);
   * UseAfterReleaseError for a released pointer; DeviceMismatchError for a pointer of another device
   */
  bindingOf(ptr: DataPtr): { buffer: GPUBuffer; offset: number; size: number } {
    if (!(ptr instanceof DataPtr)) throw new InvalidArgumentError('ptr', ptr, 'a DataPtr of this allocator');
    if (ptr.isReleased) throw new UseAfterReleaseError(`Cannot bind the ${ptr.byteLength}-byte allocation at 0x${ptr.address.toString(16)}: it was already released.`);
    if (!isSameDevice(ptr.device, this.device)) throw new DeviceMismatchError(`ptr lives on ${formatDevice(ptr.device)}, but this allocator serves ${formatDevice(this.device)}.`);
    this.#checkBuffer('ptr', ptr);
    const max = this.backend.maxStorageBufferBindingSize;
    if (ptr.byteLength > max) throw new InvalidArgumentError('ptr.byteLength', ptr.byteLength, `at most maxStorageBufferBindingSize (${max}) to bind whole`);
    return { buffer: ptr.handle as GPUBuffer, offset: ptr.byteOffset, size: Math.ceil(ptr.byteLength / 4) * 4 };
  }

  /**
   * The engine's statistics with the device's (Note [One budget] in DeviceBudget.ts): `device_bytes.*`
   * (segments plus staging and scratch), `staging_bytes.*`, `transfer_bytes.current`, `budget_bytes`,
   * `paging_reserve_bytes`, `reads_over_budget`.
   */
  override memoryStats(): AllocatorStats {
    return { ...super.memoryStats(), ...this.backend.budget.stats() };
  }

  /** Releases the cached segments, and the scratch and readback buffers of host transfers. */
  override emptyCache(): void {
    super.emptyCache();
    this.backend.releaseTransferBuffers();
  }

  /**
   * Runs `release` (which frees pointers of this allocator, or releases their storages) with every free inside it
   * taken as ordered after the last `queue.submit` (Note [Frees after their submit] in SubmitEpochs.ts):
   * the blocks are reusable by the next allocation instead of after the next submit. Precondition: every command
   * buffer that uses those blocks was submitted; a block named by an encoder not yet submitted may be overwritten
   * before that encoder runs (undefined results, no error). Returns what `release` returns.
   */
  freeingSubmitted<T>(release: () => T): T {
    return this.backend.freeingSubmitted(release);
  }

  /** Resolves once released segments are really freed (destroy takes effect after the queue moves on). */
  flush(): Promise<void> {
    return this.backend.flush();
  }

  /**
   * Called by the backend when the device rejected a segment: names the live pointers it took with it, and
   * retires the segment (Note [Retired segments] in core's CachingAllocator): nothing more is carved from it,
   * and it is destroyed once those pointers are freed.
   */
  segmentFailed(buffer: GPUBuffer, error: DeviceError): void {
    if (this.isDisposed) return;
    this.engine.reportDeviceError(error, this.engine.livePointersIn(buffer));
    this.engine.retireSegment(buffer);
  }

  /** Called by the backend when the device is lost: every live pointer is affected. */
  deviceLost(error: DeviceError): void {
    if (this.isDisposed) return;
    this.engine.reportDeviceError(error, this.engine.livePointers());
  }

  /** Disposes the engine (its segments go back to the backend), then the backend's own buffers. Idempotent. */
  override dispose(): void {
    if (this.isDisposed) return;
    super.dispose();
    this.backend.dispose();
  }

  /** @throws DeviceMismatchError when a live pointer's buffer was made by another GPUDevice */
  #checkBuffer(argument: string, ptr: DataPtr): void {
    if (!(ptr instanceof DataPtr) || ptr.isReleased || ptr.handle === null || !isSameDevice(ptr.device, this.device)) return; // the engine's checks answer
    if (this.backend.isDeviceBuffer(ptr.handle as GPUBuffer)) return;
    throw new DeviceMismatchError(
      `${argument} is a buffer of another GPUDevice (an allocator of another runtime or device, both ${formatDevice(this.device)}); this allocator's device cannot use it. Copy through the host (readBytes, then writeBytes).`,
    );
  }
}
