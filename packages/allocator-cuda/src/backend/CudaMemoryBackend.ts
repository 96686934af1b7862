import type { Device, MemoryBackend, Pager } from '@stowage/core';
import type { BackendEvent, MemoryBlock, PageMapping, StreamId } from '@stowage/core/plugin-kit';
import type { CudaContext, CudaDriver, CudaEvent } from '../driver/CudaDriver.js';
import { isCudaError } from '../driver/CudaError.js';
import { CudaDeviceAttribute } from '../driver/CudaResult.js';
import { CudaCopyStream } from './CudaCopyStream.js';
import { CudaPageMapping } from './CudaPageMapping.js';
import type { CudaStreams } from './CudaStreams.js';

export interface CudaMemoryBackendOptions {
  readonly driver: CudaDriver;
  /** `{ type: 'cuda', index }`: the device ordinal the backend serves. */
  readonly device: Device;
  /** The stream table shared by the driver's devices. */
  readonly streams: CudaStreams;
  /**
   * Offer page mapping (expandable segments) on the virtual memory management calls. Default: when the device
   * supports them (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED).
   */
  readonly pageMapping?: boolean;
  /** Expandable segments' pages are exportable to other processes (see CudaPageMappingOptions). Default true. */
  readonly shareableSegments?: boolean;
}

/** An event of the engine's: a pooled driver event recorded on a stream; `cu` goes back to the pool once complete. */
interface CudaBackendEvent extends BackendEvent {
  cu: CudaEvent | null;
}

/** cuEventCreate's CU_EVENT_DISABLE_TIMING: events used only for ordering record faster. */
const EVENT_DISABLE_TIMING = 2;

/**
 * The CUDA driver as a MemoryBackend: fixed segments are cuMemAlloc_v2 allocations (handles and addresses are the
 * device pointer), expandable segments address ranges of the virtual memory management API (CudaPageMapping),
 * copies and writes go through the legacy default stream (stream 0), reads through a stream of their own without
 * blocking the JavaScript thread (Note [Reads on a blocking stream]), other streams are the {@link CudaStreams}
 * table's, and events are pooled driver events, as PyTorch pools them. The backend keeps the device's primary
 * context retained and makes it current before every call that needs one, so that several devices can share the
 * JavaScript thread.
 *
 * The driver's CUDA_ERROR_OUT_OF_MEMORY is a `null` segment (the engine then runs its out-of-memory chain); every
 * other failure is a CudaError out of the call.
 *
 * Invariants: every driver event created for the engine is in `#events`, and is either in flight (the `cu` of an
 * event handed out) or in `#eventPool`, never both; an event handed out whose `cu` is null has gone back.
 */
export class CudaMemoryBackend implements MemoryBackend<bigint> {
  readonly device: Device;
  /** cuMemAlloc_v2 aligns allocations to at least 256 bytes. */
  readonly alignment = 256;
  readonly capacityBytes: number;
  readonly defaultStream: StreamId = 0;
  readonly pageMapping: PageMapping<bigint> | undefined;
  /** The same object as `pageMapping`, with what IPC export needs of it. */
  readonly cudaPageMapping: CudaPageMapping | undefined;
  /** LMS paging: set by the CudaAllocator, whose engine the pager records its stream with. */
  pager: Pager | undefined = undefined;
  readonly driver: CudaDriver;
  /** The device's `CUdevice`. */
  readonly cuDevice: number;
  readonly context: CudaContext;
  readonly streams: CudaStreams;
  /** The stream `read` copies on (blocking: Note [Reads on a blocking stream]), with its pinned buffers. */
  readonly readCopies: CudaCopyStream;
  /** Every driver event created for the engine's `recordEvent`, in flight or pooled: destroyed by `dispose`. */
  readonly #events: CudaEvent[] = [];
  readonly #eventPool: CudaEvent[] = [];
  #disposed = false;

  /** @throws CudaError for a device the driver does not have (CUDA_ERROR_INVALID_DEVICE) */
  constructor(options: CudaMemoryBackendOptions) {
    this.driver = options.driver;
    this.device = options.device;
    this.streams = options.streams;
    this.cuDevice = this.driver.device(this.device.index);
    this.readCopies = new CudaCopyStream(this, { nonBlocking: false });
    this.context = this.driver.retainPrimaryContext(this.cuDevice);
    try {
      this.enter();
      this.capacityBytes = this.driver.deviceTotalBytes(this.cuDevice);
      const vmm = options.pageMapping ?? this.driver.deviceAttribute(this.cuDevice, CudaDeviceAttribute.VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) === 1;
      this.cudaPageMapping = vmm ? new CudaPageMapping(this, { shareable: options.shareableSegments ?? true }) : undefined;
      this.pageMapping = this.cudaPageMapping;
    } catch (error) {
      this.driver.releasePrimaryContext(this.cuDevice);
      throw error;
    }
  }

  /**
   * Makes this device's primary context current on the JavaScript thread, before every call that acts on the current
   * context. Always, not only when another device came between: other allocators (another runtime's plugin, another
   * CUDA library) share the thread's current context and cannot be known here, and cuCtxSetCurrent costs about 45 ns
   * through koffi (no out-parameter), against a cuCtxGetCurrent query's 300 ns.
   */
  enter(): void {
    this.driver.setCurrentContext(this.context);
  }

  malloc(byteLength: number): MemoryBlock<bigint> | null {
    this.enter();
    let ptr: bigint;
    try {
      ptr = this.driver.memAlloc(byteLength);
    } catch (error) {
      if (isCudaError(error, 'CUDA_ERROR_OUT_OF_MEMORY')) return null;
      throw error;
    }
    return { handle: ptr, byteOffset: 0, address: Number(ptr), byteLength };
  }

  free(segment: MemoryBlock<bigint>): void {
    this.enter();
    this.driver.memFree(segment.handle);
  }

  copy(dst: bigint, dstOffset: number, src: bigint, srcOffset: number, byteLength: number): void {
    this.enter();
    this.driver.memcpyDtoDAsync(dst + BigInt(dstOffset), src + BigInt(srcOffset), byteLength, null);
  }

  write(dst: bigint, dstOffset: number, bytes: Uint8Array): void {
    this.enter();
    this.driver.memcpyHtoD(dst + BigInt(dstOffset), bytes);
  }

  /**
   * A device-to-host copy that does not block the JavaScript thread: cuMemcpyDtoHAsync into pooled pinned memory on
   * `readCopies`' stream, after the work queued on the default stream before it, and before the default stream's
   * later work (Note [Reads on a blocking stream]); resolves with a copy of the bytes once the copy's event
   * completes (learnt on a koffi worker thread). Rejects with CudaError when the driver fails the wait.
   * @throws CudaError when the driver refuses the copy (the promise is not made)
   */
  read(src: bigint, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    if (byteLength === 0) return Promise.resolve(new Uint8Array(0));
    this.enter();
    const copies = this.readCopies;
    const stream = this.streams.handle(copies.stream);
    const staging = copies.take(byteLength);
    try {
      this.driver.memcpyDtoHAsync(staging.address, src + BigInt(srcOffset), byteLength, stream);
    } catch (error) {
      copies.give(staging);
      throw error;
    }
    return new Promise<Uint8Array>((resolve, reject) => {
      copies.queue(staging, (error) => (error === undefined ? resolve(staging.bytes.slice(0, byteLength)) : reject(error)));
    });
  }

  isStream(stream: StreamId): boolean {
    return this.streams.isStreamOf(stream, this.device.index);
  }

  recordEvent(stream: StreamId): BackendEvent {
    const cu = this.#eventPool.pop() ?? this.#createEvent();
    try {
      this.driver.eventRecord(cu, this.streams.handle(stream));
    } catch (error) {
      this.#eventPool.push(cu);
      throw error;
    }
    const event: CudaBackendEvent = { stream, cu };
    return event;
  }

  isEventComplete(event: BackendEvent): boolean {
    const e = event as CudaBackendEvent;
    if (e.cu === null) return true;
    if (!this.driver.eventQuery(e.cu)) return false;
    this.#recycle(e);
    return true;
  }

  synchronizeEvent(event: BackendEvent): void {
    const e = event as CudaBackendEvent;
    if (e.cu === null) return;
    this.driver.eventSynchronize(e.cu);
    this.#recycle(e);
  }

  // Note [Reads on a blocking stream]
  // `read` copies on a stream of the backend's that synchronizes with the legacy default stream (a blocking stream):
  // the copy follows every operation queued on the default stream before it (writes, copies, a page-in's wait),
  // and every operation queued on the default stream afterwards (a write to the block, or to a block reusing its
  // memory after a free) waits for the copy, with no event either way. Nothing is queued on the default stream
  // itself, which would block the JavaScript thread on the stand-in (its default stream runs on the calling thread
  // once the blocking streams have drained). Unlike a copy on the default stream, the read does not wait for work
  // queued on another blocking stream after the default stream's last operation (no blocking stream waits for
  // another): synchronize that stream first, or read after default-stream work. Non-blocking streams were never
  // waited for.

  /** Free and total bytes of the device, as the driver reports them (other processes' memory included). */
  memoryInfo(): { freeBytes: number; totalBytes: number } {
    this.enter();
    return this.driver.memInfo();
  }

  /**
   * Blocks until every read in flight has completed (each resolves) and every event recorded for the engine has:
   * frees pending on other streams' work (`recordStream`). CudaAllocator calls it before the engine returns its
   * segments, so that no copy or stream still uses memory going back to the driver.
   */
  synchronize(): void {
    this.readCopies.synchronize();
    for (const cu of this.#events) this.driver.eventSynchronize(cu);
  }

  /**
   * Waits for reads and events in flight (`synchronize`), then destroys the backend's streams, its events (those of
   * frees still pending when the engine was disposed included: the engine forgets them) and pinned buffers, and
   * releases the device's primary context. Idempotent.
   */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.enter();
    this.synchronize();
    this.readCopies.dispose();
    this.streams.destroyAll(this.device.index);
    this.#eventPool.length = 0;
    for (const cu of this.#events.splice(0)) this.driver.eventDestroy(cu);
    this.driver.releasePrimaryContext(this.cuDevice);
  }

  #createEvent(): CudaEvent {
    this.enter();
    const cu = this.driver.eventCreate(EVENT_DISABLE_TIMING);
    this.#events.push(cu);
    return cu;
  }

  #recycle(e: CudaBackendEvent): void {
    this.#eventPool.push(e.cu!);
    e.cu = null;
  }
}
