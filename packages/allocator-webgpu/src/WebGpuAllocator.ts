import type { AllocateOptions, CachingAllocatorOptions, DataPtr, DeviceError } from '@stowage/core';
import { CachingAllocator, DataPtr as DataPtrClass, InvalidArgumentError, isSameDevice } from '@stowage/core';
import type { WebGpuMemoryBackend } from './WebGpuMemoryBackend.js';
import { WebGpuPager } from './WebGpuPager.js';

/** The context of a pointer over a caller's GPUBuffer: Stowage never frees it. */
const IMPORTED = Symbol('imported GPUBuffer');

export interface ImportOptions {
  /** Start of the range inside the buffer. Default 0; a multiple of 4. */
  readonly byteOffset?: number;
  /** Length of the range. Default: the rest of the buffer. */
  readonly byteLength?: number;
}

/**
 * The caching engine over WebGPU: tensors are (GPUBuffer, offset, size) binding ranges carved from large
 * buffers, frees wait for the next submit (Note [Submit epochs]), and `flush()` waits until released segments
 * are really freed. A lost device or a rejected segment is reported as a `deviceError` event naming the live
 * pointers affected; after a loss every allocation throws DeviceError.
 */
export class WebGpuAllocator extends CachingAllocator<GPUBuffer> {
  declare readonly backend: WebGpuMemoryBackend;
  /** Pages blocks out to host memory and back, for LMS. */
  readonly pager: WebGpuPager;

  constructor(backend: WebGpuMemoryBackend, options: CachingAllocatorOptions = {}) {
    super(backend, options);
    this.pager = new WebGpuPager(this);
  }

  override allocate(nbytes: number, options?: AllocateOptions): DataPtr<GPUBuffer> {
    const lost = this.backend.lostError;
    if (lost) throw lost;
    return super.allocate(nbytes, options);
  }

  /**
   * Wraps a caller's GPUBuffer (or a range of it) as a pointer without copying. Stowage never frees or destroys
   * it; releasing the pointer only forgets it. Wrap it in a storage with `runtime.adopt(ptr)`.
   * @throws InvalidArgumentError for a range outside the buffer's whole 4-byte words or an offset not 4-byte
   * aligned; DisposedError after dispose; DeviceError after the device was lost
   */
  importBuffer(buffer: GPUBuffer, options: ImportOptions = {}): DataPtr<GPUBuffer> {
    this.checkOpen('importBuffer');
    const lost = this.backend.lostError;
    if (lost) throw lost;
    if (typeof buffer !== 'object' || buffer === null || typeof (buffer as GPUBuffer).size !== 'number') {
      throw new InvalidArgumentError('buffer', buffer, 'a GPUBuffer of this device');
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
    return new DataPtrClass<GPUBuffer>({
      device: this.device,
      byteLength,
      handle: buffer,
      byteOffset,
      address: this.backend.takeAddress(byteLength),
      context: IMPORTED,
      deleter: null,
    });
  }

  /** True for a pointer made by `importBuffer`. */
  isImported(ptr: DataPtr): boolean {
    return ptr.context === IMPORTED && isSameDevice(ptr.device, this.device);
  }

  /**
   * The binding range of a pointer, for a bind group entry. @throws InvalidArgumentError when it is larger than
   * the device's maxStorageBufferBindingSize (bind a slice instead)
   */
  bindingOf(ptr: DataPtr): { buffer: GPUBuffer; offset: number; size: number } {
    const max = this.backend.maxStorageBufferBindingSize;
    if (ptr.byteLength > max) throw new InvalidArgumentError('ptr.byteLength', ptr.byteLength, `at most maxStorageBufferBindingSize (${max}) to bind whole`);
    return { buffer: ptr.handle as GPUBuffer, offset: ptr.byteOffset, size: Math.ceil(ptr.byteLength / 4) * 4 };
  }

  /** Releases the cached segments, and the scratch and readback buffers of host transfers. */
  override emptyCache(): void {
    super.emptyCache();
    if (!this.isDisposed) this.backend.releaseTransferBuffers();
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
    this.emitter.safeEmit('deviceError', { error, ptrs: this.livePointersIn(buffer) });
    this.retireSegment(buffer);
  }

  /** Called by the backend when the device is lost: every live pointer is affected. */
  deviceLost(error: DeviceError): void {
    this.emitter.safeEmit('deviceError', { error, ptrs: this.livePointers() });
  }

  protected override releaseAllocation(context: unknown): void {
    if (context === IMPORTED) return;
    super.releaseAllocation(context);
  }

  protected override disposeResources(): void {
    super.disposeResources();
    this.backend.dispose();
  }
}
