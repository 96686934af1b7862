import { formatBytes } from '@stowage/core';
import type { PagingRoom } from '@stowage/core/plugin-kit';
import type { StagingPool } from './StagingPool.js';

/** Bytes of the byte-copy kernel's params buffer, made with the backend and alive until it is disposed. */
export const KERNEL_PARAMS_BYTES = 16;

/** The figures of Note [One budget], merged into the allocator's `memoryStats()` (the package README lists them). */
export interface WebGpuDeviceStats {
  /** Segments plus transfer buffers: every byte Stowage holds on the device (the budget bounds it). */
  readonly 'device_bytes.current': number;
  readonly 'device_bytes.peak': number;
  /** Readback (MAP_READ) staging buffers alive: page-outs and host reads in flight, and pooled ones. */
  readonly 'staging_bytes.current': number;
  readonly 'staging_bytes.peak': number;
  /** Of staging_bytes.current, the idle pooled buffers, given back to the device when the budget needs room. */
  readonly 'staging_bytes.pooled': number;
  /** Staging, scratch and kernel-params buffers: what the device holds outside segments. */
  readonly 'transfer_bytes.current': number;
  /** The device's budget (-1 when it has none). */
  readonly budget_bytes: number;
  /** Bytes of the budget kept for page-out staging now (0 until LMS pages the device). */
  readonly paging_reserve_bytes: number;
  /** Host reads that found no room in the budget and read through staging beyond it (Note [One budget]). */
  readonly reads_over_budget: number;
}

/** What a DeviceBudget reads of its backend, and the one buffer it may give back itself. */
export interface DeviceBudgetInit {
  /** The device's budget (the plugin's `limit`); infinite when absent. */
  readonly budgetBytes?: number | undefined;
  /** Bytes kept for page-out staging once paging is enabled; 0 when absent. */
  readonly pagingReserveBytes?: number | undefined;
  /** The readback staging pool (in flight and pooled buffers count against the budget). */
  readonly staging: StagingPool;
  /** Bytes of the backend's live segments. */
  reservedBytes(): number;
  /** Bytes of the backend's scratch buffer (0 when there is none). */
  scratchBytes(): number;
  /** Destroys the scratch buffer, giving its room back. */
  dropScratch(): void;
}

/**
 * The device's one budget, for one WebGPU backend.
 *
 * Note [One budget]: the device's budget B (the plugin's `limit`) bounds every buffer Stowage creates on it:
 * segments, the readback staging of host reads and LMS page-outs (in flight or pooled), the scratch buffer and
 * the byte-copy kernel's params (16 bytes made with the backend: counted, but left out of the checks below). The engine bounds its segments by its `memoryLimit` (B); this backend bounds the
 * sum, so the engine needs to know nothing of staging:
 * - `malloc` has room for a segment of n bytes only while reserved + n + max(transfer, reserve) <= B, where
 *   transfer is every byte outside segments and reserve is the part of B kept for page-out staging while LMS pages
 *   this device (`pagingReserveBytes`, 0 without LMS). It first gives pooled staging and the scratch buffer back
 *   to the device when that makes room; otherwise it answers "no room" and the engine runs its out-of-memory chain
 *   (release the cache, reclaim LMS storages, retry) as for the engine's own limit.
 * - A page-out (`pageOutRead`) must hold its bytes on the device, in a staging buffer, until `mapAsync` resolves:
 *   reclaiming a storage whose bytes are not yet on the host gains nothing until then. Its staging buffer is made
 *   only when reserved + transfer + its size <= B (after giving pooled staging back); otherwise the page-out is
 *   refused (null; LMS counts `page_out_refused`) and LMS reclaims another storage instead: one whose host copy exists
 *   copies nothing and needs no staging. The reserve is what keeps page-outs possible when segments fill their
 *   share, and bounds the bytes of page-outs in flight. Once mapped and copied out, a staging buffer is pooled
 *   (within the budget, up to 64 MiB, given back on demand) or destroyed. A page-out whose bytes nobody wants any
 *   more (LMS released or rewrote the storage) is cancelled: its staging buffer is destroyed and uncounted at once.
 * - A host read (`read`) records its copy at once, as every transfer does, so it cannot wait for room: when its
 *   staging does not fit after the pool was given back, it reads beyond the budget and counts
 *   `reads_over_budget` (under LMS, `runtime.read` of a reclaimed storage reads its host copy and needs none).
 *
 *
 * Invariants: reservedBytes + transferBytes <= budgetBytes + KERNEL_PARAMS_BYTES, but for host reads counted in
 * `reads_over_budget`; devicePeakBytes >= deviceBytes after every noteDeviceBytes().
 */
export class DeviceBudget {
  /** The device's budget; infinite when none was given. */
  readonly budgetBytes: number;
  readonly #reserveBytes: number;
  readonly #init: DeviceBudgetInit;
  #pagingEnabled = false;
  #devicePeakBytes = 0;
  #readsOverBudget = 0;

  constructor(init: DeviceBudgetInit) {
    this.#init = init;
    this.budgetBytes = init.budgetBytes ?? Number.POSITIVE_INFINITY;
    this.#reserveBytes = Math.max(0, Math.min(init.pagingReserveBytes ?? 0, this.budgetBytes));
    this.noteDeviceBytes();
  }

  /** Bytes Stowage holds on the device outside segments: staging (in flight and pooled), scratch, kernel params. */
  get transferBytes(): number {
    return this.#budgetedTransferBytes + KERNEL_PARAMS_BYTES;
  }

  /** Segments plus transfer buffers: every byte Stowage holds on the device now. */
  get deviceBytes(): number {
    return this.#init.reservedBytes() + this.transferBytes;
  }

  /** Bytes of the budget kept for page-out staging now: the reserve once paging is enabled, else 0. */
  get pagingReserveBytes(): number {
    return this.#pagingEnabled ? this.#reserveBytes : 0;
  }

  /** From now on segments leave `pagingReserveBytes` of the budget to page-out staging (the pager's enablePaging). */
  enablePaging(): void {
    this.#pagingEnabled = true;
  }

  /**
   * Bytes a new segment may take now within the budget, counting pooled staging and the scratch buffer as room
   * (`segmentFits` gives them back first); infinite without a budget. The engine's own limit may be less.
   */
  get segmentHeadroomBytes(): number {
    return this.budgetBytes - this.#init.reservedBytes() - Math.max(this.#init.staging.inFlightBytes, this.pagingReserveBytes);
  }

  /**
   * The staging of reads and page-outs in flight, the paging reserve and the segments' headroom beside them (Note
   * [Paging room] in core's Pager): what LMS reads to wait for page-outs only when the next allocations need the
   * room they hold.
   */
  pagingRoom(): PagingRoom {
    return { inFlightBytes: this.#init.staging.inFlightBytes, reserveBytes: this.pagingReserveBytes, headroomBytes: Math.max(0, this.segmentHeadroomBytes) };
  }

  /**
   * True when a segment of `byteLength` bytes fits the budget beside the transfer buffers and the paging reserve,
   * after giving pooled staging and the scratch buffer back to the device if that makes room.
   */
  segmentFits(byteLength: number): boolean {
    const fits = (): boolean => this.#init.reservedBytes() + byteLength + Math.max(this.#budgetedTransferBytes, this.pagingReserveBytes) <= this.budgetBytes;
    if (fits()) return true;
    this.#init.staging.trim(this.#init.reservedBytes() + byteLength + this.#budgetedTransferBytes - this.budgetBytes);
    if (fits()) return true;
    this.#init.dropScratch();
    return fits();
  }

  /** True when a staging buffer for `length` bytes fits the budget now, after giving pooled staging back if needed. */
  stagingFits(length: number): boolean {
    const staging = this.#init.staging;
    if (staging.hasPooled(length)) return true; // reusing it adds nothing
    const size = staging.sizeFor(length);
    const over = this.#init.reservedBytes() + this.#budgetedTransferBytes + size - this.budgetBytes;
    if (over <= 0) return true;
    staging.trim(over);
    return this.#init.reservedBytes() + this.#budgetedTransferBytes + size <= this.budgetBytes;
  }

  /** A host read found no room and reads through staging beyond the budget. */
  countReadOverBudget(): void {
    this.#readsOverBudget++;
  }

  /** Call after the device got a buffer: keeps `device_bytes.peak`. */
  noteDeviceBytes(): void {
    const bytes = this.deviceBytes;
    if (bytes > this.#devicePeakBytes) this.#devicePeakBytes = bytes;
  }

  /** The figures of Note [One budget], for `memoryStats()`. */
  stats(): WebGpuDeviceStats {
    const staging = this.#init.staging;
    return {
      'device_bytes.current': this.deviceBytes,
      'device_bytes.peak': this.#devicePeakBytes,
      'staging_bytes.current': staging.liveBytes,
      'staging_bytes.peak': staging.peakBytes,
      'staging_bytes.pooled': staging.pooledBytes,
      'transfer_bytes.current': this.transferBytes,
      budget_bytes: Number.isFinite(this.budgetBytes) ? this.budgetBytes : -1,
      paging_reserve_bytes: this.pagingReserveBytes,
      reads_over_budget: this.#readsOverBudget,
    };
  }

  /** What an out-of-memory error should add about the budget's transfer buffers; undefined when they hold nothing. */
  outOfMemoryHint(): string | undefined {
    const transfer = this.transferBytes;
    if (!Number.isFinite(this.budgetBytes) || transfer + this.pagingReserveBytes <= KERNEL_PARAMS_BYTES) return undefined;
    const staging = this.#init.staging;
    return `Of the ${formatBytes(this.budgetBytes)} budget, ${formatBytes(transfer)} are staging and scratch buffers (${formatBytes(staging.inFlightBytes)} of page-outs and reads in flight) and ${formatBytes(this.pagingReserveBytes)} are kept for page-out staging; page-outs in flight give their room back once they land (await pinAsync, or the storages' lms.ready()).`;
  }

  /**
   * The transfer bytes the budget's checks count: all but the byte-copy kernel's 16-byte params buffer, which is
   * there from the start (`device_bytes` counts it, so it may pass the budget by those 16 bytes).
   */
  get #budgetedTransferBytes(): number {
    return this.#init.staging.liveBytes + this.#init.scratchBytes();
  }
}
