import type { AllocateOptions, CachingAllocatorOptions, DataPtr, MemorySnapshot } from '@stowage/core';
import type { StreamId } from '@stowage/core/plugin-kit';
import { checkBoolean, checkOptions } from '@stowage/core/plugin-kit';
import { CachingAllocator, DataPtr as DataPtrClass, ForwardingAllocator, InvalidArgumentError } from '@stowage/core';
import type { CudaMemoryBackend } from './backend/CudaMemoryBackend.js';
import { CudaPager } from './backend/CudaPager.js';
import type { CudaIpcExport } from './ipc/CudaIpc.js';
import { CudaIpc } from './ipc/CudaIpc.js';
import type { CudaStream } from './driver/CudaDriver.js';

const MiB = 2 ** 20;

/**
 * Note [Expandable segments on CUDA]: how the CUDA allocator grows expandable segments unless told otherwise (the
 * pytorch preset keeps PyTorch's own configuration, which `expandable_segments:True` with it reproduces). Each of
 * these was chosen by measurement on the must-match traces (`pnpm bench:cuda`; figures in the README) against a model
 * of PyTorch's expandable segments that the trace-parity test holds to traces PyTorch recorded with them:
 * - Pages of 2 MiB in the small pool and 20 MiB in the large pool, in pools kept apart, with PyTorch's best fit
 *   (Note [Best fit next to unmapped space] in core's ExpandableSegments.ts): blocks are placed as PyTorch places
 *   them, so peak reserved bytes are PyTorch's. A unified pool, or 2 MiB pages in the large pool, lowers the peak on
 *   some traces and raises it (by up to 7.8 %) on others.
 * - Each growth is one physical allocation (a run of pages, Note [Page runs] there): 3 driver calls (cuMemCreate,
 *   cuMemMap, cuMemSetAccess) where PyTorch makes two per page and one more. The driver maps and unmaps an
 *   allocation only whole, so a run goes back to the device only once all of it is free.
 * - Free memory is unmapped only under pressure (emptyCache, trim, the out-of-memory chain), as PyTorch does: with
 *   runs of 20 MiB pages, unmapping free runs before each new peak (`fragmentationLimit: 0.005`) lowers the peak by
 *   up to 0.5 % on the small traces, raises it by up to 0.07 % on others (what it unmapped is mapped again
 *   elsewhere), and makes more calls than PyTorch on one trace (1.05 ×).
 * Explicit options win over each default.
 */
export const CUDA_ENGINE_DEFAULTS = {
  unifiedPools: false,
  segmentPageBytes: { small: 2 * MiB, large: 20 * MiB },
  pageRuns: true,
  fragmentationLimit: Number.POSITIVE_INFINITY,
} as const satisfies CachingAllocatorOptions;

/** `options` with CUDA_ENGINE_DEFAULTS under them, unless the pytorch preset or fixed segments are asked for. */
export function cudaEngineOptions(options: CachingAllocatorOptions, pageMapping: boolean): CachingAllocatorOptions {
  if (options.preset === 'pytorch' || options.expandableSegments === false || !pageMapping) return options;
  const merged: Record<string, unknown> = { ...CUDA_ENGINE_DEFAULTS };
  for (const [key, value] of Object.entries(options)) if (value !== undefined) merged[key] = value;
  return merged as CachingAllocatorOptions;
}

export interface CudaAllocatorSettings {
  /** The configuration string the engine options came from (`PYTORCH_CUDA_ALLOC_CONF`), for snapshots. */
  readonly allocConf?: string;
}

/**
 * The CUDA allocator: the caching engine over a CudaMemoryBackend (its upstream, `engine`), with the device's
 * services beside it: streams by number (`createStream`, `adoptStream`, `streamOf`), the device pointer of a
 * DataPtr (`devicePointer`) for kernels, and snapshots that carry the configuration string so that PyTorch's memory
 * visualizer shows it.
 */
export class CudaAllocator extends ForwardingAllocator {
  readonly engine: CachingAllocator<bigint>;
  readonly backend: CudaMemoryBackend;
  /** Pages blocks out to pinned host memory and back on a stream of its own, for LMS. */
  readonly pager: CudaPager;
  readonly #ipc: CudaIpc;
  readonly #allocConf: string;

  /** @throws InvalidArgumentError for a bad engine option. Defaults: Note [Expandable segments on CUDA]. */
  constructor(backend: CudaMemoryBackend, options: CachingAllocatorOptions = {}, settings: CudaAllocatorSettings = {}) {
    const engine = new CachingAllocator<bigint>(backend, cudaEngineOptions(options, backend.pageMapping !== undefined));
    super(engine);
    this.engine = engine;
    this.backend = backend;
    this.pager = new CudaPager(backend, engine);
    backend.pager = this.pager;
    this.#ipc = new CudaIpc(backend);
    this.#allocConf = settings.allocConf ?? '';
  }

  /** Straight to the engine: this allocator adopts no pointers, and the hot path pays for no layer between them. */
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr<bigint> {
    return this.engine.allocate(nbytes, options);
  }

  override free(ptr: DataPtr): void {
    this.engine.free(ptr);
  }

  /**
   * A new stream of this device, by number (for `allocate(n, { stream })` and `recordStream`); its driver handle is
   * `streamOf(number)`. `nonBlocking`: it does not synchronize with the default stream. Destroyed with the allocator.
   */
  createStream(options: { readonly nonBlocking?: boolean } = {}): StreamId {
    this.checkOpen('createStream');
    const nonBlocking = checkBoolean('options.nonBlocking', checkOptions('options', options, ['nonBlocking']).nonBlocking) ?? false;
    this.backend.enter();
    return this.backend.streams.create(this.backend.device.index, nonBlocking);
  }

  /** Numbers a stream the caller created on this device (the caller keeps and destroys it, after `forgetStream`). */
  adoptStream(stream: CudaStream): StreamId {
    this.checkOpen('adoptStream');
    return this.backend.streams.adopt(this.backend.device.index, stream);
  }

  /** Destroys a stream from `createStream`, or forgets one from `adoptStream`. @throws InvalidArgumentError for an unknown number */
  destroyStream(stream: StreamId): void {
    this.checkOpen('destroyStream');
    this.#checkOwnStream(stream);
    this.backend.streams.destroy(stream);
  }

  /** The driver stream of a number (null: the legacy default stream), to launch work on. */
  streamOf(stream: StreamId): CudaStream | null {
    this.checkOpen('streamOf');
    this.#checkOwnStream(stream);
    return this.backend.streams.handle(stream);
  }

  /**
   * The device address of a live pointer's first byte on this device, for a kernel's arguments: this allocator's
   * pointers, and the ones `openIpc` made from another process's memory.
   * @throws InvalidArgumentError for anything else (a released pointer, one of another device)
   */
  devicePointer(ptr: DataPtr): bigint {
    const { type, index } = this.backend.device;
    if (!(ptr instanceof DataPtrClass) || ptr.isReleased || ptr.device.type !== type || ptr.device.index !== index || typeof ptr.handle !== 'bigint') {
      throw new InvalidArgumentError('ptr', ptr, `a live DataPtr on ${type}:${index}`);
    }
    return ptr.handle + BigInt(ptr.byteOffset);
  }

  /**
   * Describes a live pointer's memory so that another process can open it (`openIpc` there): the legacy IPC handle of
   * its segment and its offset for a fixed segment, as PyTorch sends a tensor; the POSIX file descriptors of the
   * physical pages under it for an expandable segment (Note [Sharing expandable segments] in CudaIpc.ts), which the
   * caller sends (SCM_RIGHTS, pidfd_getfd, a child's stdio) and then closes. Only plain data and descriptors: the
   * memory stays this allocator's, and freeing the pointer while another process uses it is the caller's to prevent
   * (`@stowage/ipc` counts references).
   * @throws InvalidArgumentError for a pointer this allocator did not allocate, a released or zero-byte one, or one in
   * an expandable segment made with `shareableSegments: false`; CudaError from the driver
   */
  exportIpc(ptr: DataPtr): CudaIpcExport {
    this.checkOpen('exportIpc');
    if (!(ptr instanceof DataPtrClass) || ptr.isReleased || this.engine.describeBlock(ptr) === undefined || ptr.byteLength === 0) {
      throw new InvalidArgumentError('ptr', ptr, `a live, non-empty DataPtr of this cuda:${this.backend.device.index} allocator`);
    }
    return this.#ipc.export(ptr);
  }

  /**
   * Opens another process's `exportIpc` on this device: a pointer to the same memory, owned by no allocator (`owns`
   * is false); releasing it closes what was opened, and the exporter's memory stays the exporter's. Closes the
   * descriptors of an expandable segment's export. Wrap it in a storage with `runtime.adopt(ptr)`.
   * @throws InvalidArgumentError for something that is not an export; CudaError from the driver (an export of this
   * same process: CUDA_ERROR_INVALID_CONTEXT for a legacy handle)
   */
  openIpc(exported: CudaIpcExport): DataPtr<bigint> {
    this.checkOpen('openIpc');
    return this.#ipc.open(exported);
  }

  override snapshot(): MemorySnapshot {
    const snapshot = super.snapshot();
    return { ...snapshot, allocator_settings: { ...snapshot.allocator_settings, PYTORCH_CUDA_ALLOC_CONF: this.#allocConf } };
  }

  /**
   * Waits for the pager's copies, the reads in flight and the events of frees still pending on other streams, then
   * disposes the engine (its segments go back to the driver, no stream using them any more), then the backend's
   * streams, events and context. Idempotent.
   */
  override dispose(): void {
    if (this.isDisposed) return;
    this.pager.dispose();
    this.backend.synchronize();
    super.dispose();
    this.backend.dispose();
  }

  #checkOwnStream(stream: StreamId): void {
    if (stream === 0 || this.backend.isStream(stream)) return;
    const owner = this.backend.streams.deviceOf(stream);
    const which = owner === undefined ? 'names no stream' : `is a stream of cuda:${owner}`;
    throw new InvalidArgumentError('stream', stream, `a stream of cuda:${this.backend.device.index} (${which})`);
  }
}
