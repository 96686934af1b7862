import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import { DataPtr } from '../storage/DataPtr.js';
import type { DeviceLike } from '../contracts/Device.js';
import { formatDevice, parseDevice } from '../contracts/Device.js';
import { DeviceError } from '../errors/DeviceError.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import { StowageError } from '../errors/StowageError.js';
import { AllocatorBase } from '../internal/AllocatorBase.js';
import { isSmallRequest } from '../engine/SizeClass.js';
import { checkByteCount, checkFunction, checkOptions } from '../validation/validate.js';
import { describeValue } from '../validation/describeValue.js';
import type { LmsStorage } from '../contracts/LmsStorage.js';
import type { BackendEvent, MemoryBackend } from '../contracts/MemoryBackend.js';
import type { MemoryBlock } from '../contracts/MemoryBlock.js';
import type { MemorySnapshot, SnapshotSegment } from '../contracts/MemorySnapshot.js';
import type { StorageImpl } from '../storage/StorageImpl.js';

/**
 * The least an allocator must do; {@link makeAllocator} supplies the rest. Methods receive validated
 * arguments only.
 */
export interface MinimalAllocator<H = unknown> {
  readonly device: DeviceLike;
  /** Power of two; every block's address is a multiple of it. */
  readonly alignment: number;
  /** Device capacity or budget in bytes, for out-of-memory messages; undefined when unknown. */
  readonly capacityBytes?: number | undefined;
  /** A block of at least `nbytes` bytes, or null when there is no room. */
  allocate(nbytes: number, options: AllocateOptions): MemoryBlock<H> | null;
  /** Returns a block from `allocate`. Called exactly once per block. */
  free(block: MemoryBlock<H>): void;
  copy(dst: H, dstOffset: number, src: H, srcOffset: number, byteLength: number): void;
  write(dst: H, dstOffset: number, bytes: Uint8Array): void;
  read(src: H, srcOffset: number, byteLength: number): Promise<Uint8Array>;
  /**
   * For a core that holds memory beyond its live blocks (a cache, an arena): called once, at construction, with
   * the sink it must report every segment it reserves from and releases to the device. Without it, each live
   * block counts as its own segment.
   */
  bindSegments?(sink: SegmentSink): void;
  /** Returns cached memory to the device; called by `emptyCache()` and before the out-of-memory retry. */
  emptyCache?(): void;
  /** Segments for `snapshot()`; default: one segment per live block. */
  snapshotSegments?(): SnapshotSegment[];
  /** Shown as the snapshot's `allocator_settings`. */
  readonly settings?: Readonly<Record<string, unknown>>;
  asLmsStorage?(storage: StorageImpl): LmsStorage | null;
  /** Frees whatever the core holds beyond its blocks (called after every live block was freed). */
  dispose?(): void;
}

/** Where a {@link MinimalAllocator} reports the segments it holds from the device. */
export interface SegmentSink {
  reserved(segment: { readonly address: number; readonly byteLength: number }): void;
  released(segment: { readonly address: number; readonly byteLength: number }): void;
}

/** What a core's read resolved to, for an error message. */
function describeCount(bytes: unknown): string {
  return bytes instanceof Uint8Array ? `${bytes.byteLength} bytes` : describeValue(bytes);
}

/** The allocator's record of one live allocation: a DataPtr's context. */
interface Allocation<H> {
  readonly block: MemoryBlock<H>;
  readonly requestedBytes: number;
  ptr: DataPtr<H> | undefined;
  /** True once the block went back to the core (freed, or reclaimed by dispose). */
  freed: boolean;
}

/**
 * Builds a full {@link Allocator} around a {@link MinimalAllocator}: argument validation, DataPtr ownership and
 * double-free detection, PyTorch-keyed statistics, events, the out-of-memory retry after `emptyCache`, typed
 * errors and snapshots.
 *
 * Note [Checking the core]: the core is user code, so what it returns is checked before anything counts it.
 * Every block must be an object whose `byteLength` is at least the request, whose `address` and `byteOffset` are
 * non-negative safe integers with the address a multiple of `alignment`, and (when not empty) whose address no
 * other live non-empty block has (a map by address: O(1); a block overlapping another at a different address
 * is not caught). A `read` must resolve to a Uint8Array of the asked length. A violation throws a DeviceError
 * naming the core's fault; a refused block is handed back to the core's `free` and never counted, so the
 * statistics still equal a recount of the live pointers.
 * @throws InvalidArgumentError when `core` is not a MinimalAllocator (checked here, not at the first allocate)
 */
export function makeAllocator<H>(core: MinimalAllocator<H>): Allocator {
  checkCore(core);
  return new ManagedAllocator(core);
}

/** Throws unless `core` has the members a MinimalAllocator must have. */
function checkCore(core: unknown): void {
  const what = 'a MinimalAllocator: an object with device, alignment, allocate, free, copy, write and read';
  if (typeof core !== 'object' || core === null || Array.isArray(core)) throw new InvalidArgumentError('core', core, what);
  const c = core as Record<string, unknown>;
  for (const method of ['allocate', 'free', 'copy', 'write', 'read'] as const) {
    checkFunction(`core.${method}`, c[method], `a function (${what})`);
  }
  for (const method of ['bindSegments', 'emptyCache', 'snapshotSegments', 'asLmsStorage', 'dispose'] as const) {
    if (c[method] !== undefined) checkFunction(`core.${method}`, c[method], 'a function, or absent');
  }
  parseDevice(c.device as DeviceLike, 'core.device');
  const capacity = c.capacityBytes;
  if (capacity !== undefined && (typeof capacity !== 'number' || !(capacity >= 0))) {
    throw new InvalidArgumentError('core.capacityBytes', capacity, 'a non-negative number of bytes, or undefined');
  }
}

/**
 * An allocator that asks the backend for every allocation and returns it on every free: no cache. The
 * baseline the caching engine is measured against, and a correct allocator for any backend.
 */
export function makeDirectAllocator<H>(backend: MemoryBackend<H>): Allocator {
  if (typeof backend !== 'object' || backend === null || typeof backend.malloc !== 'function' || typeof backend.free !== 'function') {
    throw new InvalidArgumentError('backend', backend, 'a MemoryBackend');
  }
  // A backend whose freed memory may still be read by unsubmitted work (deferredFree) gets its frees back
  // only once an event recorded at free time completes; until then the memory stays held.
  // Each block is its own segment, reported to the ManagedAllocator when the backend really takes or frees it.
  const pending: { block: MemoryBlock<H>; event: BackendEvent }[] = [];
  let segments: SegmentSink = { reserved: () => {}, released: () => {} };
  const release = (block: MemoryBlock<H>): void => {
    backend.free(block);
    segments.released(block);
  };
  const settle = (force: boolean): void => {
    let done = 0;
    while (done < pending.length && (force || backend.isEventComplete(pending[done]!.event))) {
      const { block, event } = pending[done]!;
      if (force) backend.synchronizeEvent(event);
      release(block);
      done++;
    }
    pending.splice(0, done);
  };
  return new ManagedAllocator<H>({
    device: backend.device,
    alignment: backend.alignment,
    capacityBytes: backend.capacityBytes,
    allocate: (nbytes, options) => {
      if (options.stream !== undefined && !backend.isStream(options.stream)) {
        throw new InvalidArgumentError('options.stream', options.stream, `a stream of ${formatDevice(backend.device)}`);
      }
      if (pending.length > 0) settle(false);
      const block = backend.malloc(nbytes, { ...(options.stream === undefined ? {} : { stream: options.stream }), kind: backend.segmentKind?.(options) ?? 0 });
      if (block) segments.reserved(block);
      return block;
    },
    free: (block) => {
      if (backend.deferredFree) pending.push({ block, event: backend.recordEvent(backend.defaultStream) });
      else release(block);
    },
    bindSegments: (sink) => {
      segments = sink;
    },
    copy: (dst, dstOffset, src, srcOffset, n) => backend.copy(dst, dstOffset, src, srcOffset, n),
    write: (dst, dstOffset, bytes) => backend.write(dst, dstOffset, bytes),
    read: (src, srcOffset, n) => backend.read(src, srcOffset, n),
    emptyCache: () => settle(true),
    settings: { kind: 'direct' },
    dispose: () => {
      settle(true);
      backend.dispose?.();
    },
  });
}

/**
 * Invariants (live = the values of #byAddress and of #empty): live.size == stats allocation.all.current;
 * sum over live of requestedBytes == requested_bytes.all.current;
 * sum over live of block.byteLength == allocated_bytes.all.current.
 */
class ManagedAllocator<H> extends AllocatorBase<H> {
  readonly #core: MinimalAllocator<H>;
  readonly #countsSegments: boolean;
  /**
   * The live allocations: non-empty blocks by address (one per address, Note [Checking the core]), and the empty
   * ones apart (they may share an address). One map operation per allocate and per free.
   */
  readonly #byAddress = new Map<number, Allocation<H>>();
  readonly #empty = new Set<Allocation<H>>();

  constructor(core: MinimalAllocator<H>) {
    super(parseDevice(core.device, 'core.device'), core.alignment, {
      copy: (dst, dstOffset, src, srcOffset, n) => coreCall(core, 'copy()', () => core.copy(dst, dstOffset, src, srcOffset, n)),
      write: (dst, dstOffset, bytes) => coreCall(core, 'write()', () => core.write(dst, dstOffset, bytes)),
      read: async (src, srcOffset, n) => {
        const bytes: unknown = await coreCall(core, 'read()', () => core.read(src, srcOffset, n));
        if (!(bytes instanceof Uint8Array) || bytes.byteLength !== n) {
          throw new DeviceError(`The minimal allocator for ${formatDevice(parseDevice(core.device))} broke its contract: read() of ${n} bytes returned ${describeCount(bytes)}.`);
        }
        return bytes;
      },
    });
    this.#core = core;
    if (core.asLmsStorage) this.asLmsStorage = (storage) => core.asLmsStorage!(storage);
    this.#countsSegments = core.bindSegments !== undefined;
    core.bindSegments?.({
      reserved: (segment) => this.#segmentChanged(segment, 1),
      released: (segment) => this.#segmentChanged(segment, -1),
    });
  }

  asLmsStorage?: (storage: StorageImpl) => LmsStorage | null;

  allocate(nbytes: number, options: AllocateOptions = {}): DataPtr<H> {
    this.checkOpen('allocate');
    checkByteCount('nbytes', nbytes);
    checkOptions('options', options);
    const core = this.#core;
    let block = coreCall(core, `allocate(${nbytes})`, () => core.allocate(nbytes, options));
    if (block === null) {
      this.stats.num_alloc_retries++;
      this.emptyCache();
      block = coreCall(core, `allocate(${nbytes})`, () => core.allocate(nbytes, options));
    }
    if (block === null) {
      this.stats.num_ooms++;
      const stats = this.memoryStats();
      this.emitter.safeEmit('outOfMemory', { requestedBytes: nbytes, stats });
      throw new OutOfMemoryError({ device: this.device, requestedBytes: nbytes, capacityBytes: this.#core.capacityBytes, stats });
    }
    this.#checkBlock(block, nbytes);
    const allocation: Allocation<H> = { block, requestedBytes: nbytes, ptr: undefined, freed: false };
    const ptr = new DataPtr<H>({
      device: this.device,
      byteLength: nbytes,
      handle: block.handle,
      byteOffset: block.byteOffset,
      address: block.address,
      context: allocation,
      deleter: this.deleter,
    });
    allocation.ptr = ptr;
    if (block.byteLength > 0) this.#byAddress.set(block.address, allocation);
    else this.#empty.add(allocation);
    this.#count(block.byteLength, nbytes, 1);
    if (this.emitter.hears('allocated')) this.emitter.safeEmit('allocated', { ptr, requestedBytes: nbytes });
    return ptr;
  }

  snapshot(): MemorySnapshot {
    this.checkOpen('snapshot');
    const segments = this.#core.snapshotSegments?.() ?? this.#liveAllocations().map((a) => this.#segmentOf(a));
    segments.sort((a, b) => a.address - b.address);
    return { segments, device_traces: [[]], allocator_settings: { ...(this.#core.settings ?? {}) }, external_annotations: [] };
  }

  emptyCache(): void {
    this.checkOpen('emptyCache');
    const core = this.#core;
    if (core.emptyCache) coreCall(core, 'emptyCache()', () => core.emptyCache!());
  }

  /** Frees every live allocation and disposes the core; a core call that throws is reported after all were made. */
  protected disposeResources(): void {
    const core = this.#core;
    let failure: unknown;
    for (const allocation of this.#liveAllocations()) {
      allocation.freed = true;
      try {
        coreCall(core, 'free()', () => core.free(allocation.block));
      } catch (error) {
        failure ??= error;
      }
    }
    this.#byAddress.clear();
    this.#empty.clear();
    if (core.dispose) coreCall(core, 'dispose()', () => core.dispose!());
    if (failure !== undefined) throw failure;
  }

  protected releaseAllocation(context: unknown): void {
    const allocation = context as Allocation<H>;
    if (allocation.freed) return; // reclaimed by dispose(); the pointer outlived its allocator
    allocation.freed = true;
    // A live non-empty block is the only one at its address (checked at allocate), so the entry is this one's.
    if (allocation.block.byteLength > 0) this.#byAddress.delete(allocation.block.address);
    else this.#empty.delete(allocation);
    // Counted out first: a core that returns a segment inside free() reports it to consistent statistics. A core
    // whose free() throws has the block back all the same, as far as the statistics and the pointer go.
    this.#count(allocation.block.byteLength, allocation.requestedBytes, -1);
    const core = this.#core;
    coreCall(core, 'free()', () => core.free(allocation.block));
    if (this.emitter.hears('freed')) this.emitter.safeEmit('freed', { ptr: allocation.ptr! });
  }

  #liveAllocations(): Allocation<H>[] {
    return [...this.#byAddress.values(), ...this.#empty];
  }

  /**
   * Throws a DeviceError when the core's block breaks the contract (Note [Checking the core]); the block goes
   * back to the core first, uncounted.
   */
  #checkBlock(block: MemoryBlock<H> | null | undefined, nbytes: number): asserts block is MemoryBlock<H> {
    let fault: string | undefined;
    if (typeof block !== 'object' || block === null) fault = `returned ${describeValue(block)} instead of a block or null`;
    else if (typeof block.byteLength !== 'number' || !Number.isSafeInteger(block.byteLength) || block.byteLength < nbytes) {
      fault = `returned a block of ${describeValue(block.byteLength)} bytes for a ${nbytes}-byte request`;
    } else if (typeof block.address !== 'number' || !Number.isSafeInteger(block.address) || block.address < 0) {
      fault = `returned a block at address ${describeValue(block.address)}, not a non-negative safe integer`;
    } else if (typeof block.byteOffset !== 'number' || !Number.isSafeInteger(block.byteOffset) || block.byteOffset < 0) {
      fault = `returned a block at byteOffset ${describeValue(block.byteOffset)}, not a non-negative safe integer`;
    } else if (block.address % this.alignment !== 0) {
      fault = `returned a block at 0x${block.address.toString(16)}, not a multiple of its alignment ${this.alignment}`;
    } else if (block.byteLength > 0 && this.#byAddress.has(block.address)) {
      fault = `returned a block at 0x${block.address.toString(16)}, where another live block starts`;
    }
    if (fault === undefined) return;
    if (typeof block === 'object' && block !== null) {
      try {
        this.#core.free(block);
      } catch {
        // the contract fault is the one to report
      }
    }
    throw new DeviceError(`The minimal allocator for ${formatDevice(this.device)} broke its contract: allocate(${nbytes}) ${fault}.`);
  }

  /** Counts one allocation in (sign 1) or out (sign -1); each block is its own segment unless the core reports them. */
  #count(blockBytes: number, requestedBytes: number, sign: 1 | -1): void {
    const small = isSmallRequest(blockBytes);
    const s = this.stats;
    if (sign > 0) s.countAllocated(small, blockBytes, requestedBytes);
    else {
      s.countFreed(small, blockBytes);
      s.countInactive(small, blockBytes, requestedBytes);
    }
    if (!this.#countsSegments) {
      s.segment.add(small, sign);
      s.reserved_bytes.add(small, sign * blockBytes);
      if (sign > 0) s.num_device_alloc++;
      else s.num_device_free++;
    }
  }

  #segmentChanged(segment: { readonly address: number; readonly byteLength: number }, sign: 1 | -1): void {
    const small = isSmallRequest(segment.byteLength);
    this.stats.segment.add(small, sign);
    this.stats.reserved_bytes.add(small, sign * segment.byteLength);
    if (sign > 0) this.stats.num_device_alloc++;
    else this.stats.num_device_free++;
    const event = { address: segment.address, bytes: segment.byteLength };
    if (sign > 0) this.emitter.safeEmit('segmentReserved', event);
    else this.emitter.safeEmit('segmentReleased', event);
  }

  #segmentOf(a: Allocation<H>): SnapshotSegment {
    const size = a.block.byteLength;
    return {
      device: this.device.index,
      address: a.block.address,
      total_size: size,
      allocated_size: size,
      active_size: size,
      requested_size: a.requestedBytes,
      stream: 0,
      segment_type: isSmallRequest(size) ? 'small' : 'large',
      segment_pool_id: [0, 0],
      is_expandable: false,
      frames: [],
      blocks: [{ address: a.block.address, size, requested_size: a.requestedBytes, state: 'active_allocated', frames: [] }],
    };
  }
}

/**
 * Runs one call of the core: what it throws that is not a StowageError becomes a DeviceError naming the core's
 * device and the call, with the original as its cause (a core's own StowageErrors pass through). A promise's
 * rejection is wrapped the same way.
 */
function coreCall<T>(core: MinimalAllocator<unknown>, call: string, run: () => T): T {
  const wrap = (error: unknown): never => {
    if (error instanceof StowageError) throw error;
    throw new DeviceError(`The minimal allocator for ${formatDevice(parseDevice(core.device))} failed in ${call}: ${error instanceof Error ? error.message : describeValue(error)}`, { cause: error });
  };
  let result: T;
  try {
    result = run();
  } catch (error) {
    return wrap(error);
  }
  return result instanceof Promise ? (result.catch(wrap) as T) : result;
}
