import type { AllocateOptions, Allocator, AllocatorStats, BlockInspector, DataPtr, LmsStorage, MemorySnapshot, Pager, StorageImpl } from '@stowage/core';
import { formatBytes, ForwardingAllocator, OutOfMemoryError } from '@stowage/core';
import type { Residency } from './Residency.js';
import { DeviceResidency } from './Residency.js';
import type { LmsPolicy } from './LmsPolicy.js';
import type { SpeculationSettings } from './speculation/SpeculationOptions.js';
import { SPECULATION_OFF } from './speculation/SpeculationOptions.js';
import { StorageResidency } from './StorageResidency.js';

/** A snapshot of an LMS allocator: the engine's, plus the storages reclaimed now (they hold no block). */
export interface LmsSnapshot extends MemorySnapshot {
  readonly lms_reclaimed: readonly { readonly size: number; readonly host_copy_ready: boolean }[];
}

/**
 * An allocator whose device can page (it offers the `Pager` and `BlockInspector` services), under LMS: it hands an LMS object to every storage it backs
 * (`asLmsStorage`), adds LMS statistics to `memoryStats()` and reclaimed storages to `snapshot()`, counts how each
 * allocation was served (`alloc_distribution`), and says in an out-of-memory error what LMS held. Everything else
 * goes to the allocator it wraps, which keeps the one budget (the device plugin's `limit`).
 */
export class LmsAllocator extends ForwardingAllocator {
  readonly lms: Residency;
  #segmentsReserved = 0;
  #segmentsReleased = 0;

  /** `pager` and `inspector` are the device's services (the runtime's `Pager` and `BlockInspector` for it). */
  constructor(upstream: Allocator, pager: Pager, inspector: BlockInspector, policyOf: () => LmsPolicy, speculation: SpeculationSettings = SPECULATION_OFF) {
    super(upstream);
    this.lms = new DeviceResidency(upstream.device, pager, inspector, policyOf, speculation);
    upstream.events.on('segmentReserved', () => void this.#segmentsReserved++);
    upstream.events.on('segmentReleased', () => void this.#segmentsReleased++);
  }

  /** @throws OutOfMemoryError naming the pinned, inactive and reclaimed bytes when even reclaim found no room */
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    const lms = this.lms;
    lms.lastStep = null;
    const reserved = this.#segmentsReserved;
    const released = this.#segmentsReleased;
    let ptr: DataPtr;
    try {
      ptr = super.allocate(nbytes, options);
    } catch (error) {
      if (error instanceof OutOfMemoryError) throw this.#explain(error);
      throw error;
    }
    const source = lms.lastStep ?? (this.#segmentsReserved === reserved ? 'freelist' : this.#segmentsReleased === released ? 'device_alloc' : 'device_alloc_retry');
    lms.stats.allocated(source);
    return ptr;
  }

  override asLmsStorage(storage: StorageImpl): LmsStorage | null {
    return new StorageResidency(storage, this.lms);
  }

  override memoryStats(): AllocatorStats {
    return { ...super.memoryStats(), ...this.lms.stats.toRecord() };
  }

  override resetPeakStats(): void {
    super.resetPeakStats();
    this.lms.stats.resetPeaks();
  }

  override snapshot(): LmsSnapshot {
    const reclaimed = [...this.lms.reclaimedStorages].map((lms) => ({ size: lms.storage.byteLength, host_copy_ready: lms.hostCopyReady }));
    return { ...super.snapshot(), lms_reclaimed: reclaimed };
  }

  #explain(error: OutOfMemoryError): OutOfMemoryError {
    const lms = this.lms;
    let inactive = 0;
    for (const node of lms.list) inactive += node.storage.byteLength;
    const stats = lms.stats;
    const limit = error.budgetBytes ?? error.capacityBytes;
    // Note [Fragmented, not full]: pinned blocks cannot move, so a pinned piece of a split segment keeps the whole
    // segment reserved; the pinned set and the request may fit the budget and still find no free run.
    const advice =
      limit !== undefined && stats.pinnedBytes + error.requestedBytes <= limit
        ? `The pinned storages and the request (${formatBytes(stats.pinnedBytes + error.requestedBytes)}) fit the ${formatBytes(limit)} budget, but pinned blocks split the segments that are left: smaller segments (the engine's segmentSize) or more headroom avoid it.`
        : 'The storages pinned at once must fit the budget: pin fewer per operation or raise the limit.';
    const hint =
      `LMS: ${formatBytes(stats.pinnedBytes)} pinned by ${stats.pinned} storage(s), ${formatBytes(inactive)} inactive that could not be reclaimed ` +
      `(not placed by this allocator, e.g. shared copy-on-write data${lms.refusedSinceSettled ? ', or whose page-out the device refused: it had no room for the copy while page-outs in flight held it, until they land (pinAsync waits for them)' : ''}), ` +
      `${formatBytes(stats.hostBytes)} in host memory. ${advice}`;
    return new OutOfMemoryError(
      { device: error.device, requestedBytes: error.requestedBytes, capacityBytes: error.capacityBytes, budgetBytes: error.budgetBytes, stats: { ...error.stats, ...stats.toRecord() }, hint },
      { cause: error },
    );
  }
}
