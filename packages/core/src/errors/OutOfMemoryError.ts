import type { AllocatorStats } from '../contracts/AllocatorStats.js';
import type { Device } from '../contracts/Device.js';
import { formatDevice } from '../contracts/Device.js';
import { formatBytes } from '../units/formatBytes.js';
import { StowageError } from './StowageError.js';

/** What an allocator knew about its device when it gave up. */
export interface OutOfMemoryDetails {
  readonly device: Device;
  readonly requestedBytes: number;
  /** Total bytes the device (or the allocator's budget) can hold; undefined when unknown. */
  readonly capacityBytes: number | undefined;
  /**
   * The allocator's budget (the engine's `memoryLimit`, a plugin's `limit`), when it is a budget and not the
   * device's capacity that ran out: the message then names the budget.
   */
  readonly budgetBytes?: number | undefined;
  /**
   * Bytes counted against the budget, when it counts something other than reserved bytes (LimitingAllocator
   * counts the requested bytes of live pointers). Default: reserved bytes.
   */
  readonly budgetUsedBytes?: number | undefined;
  readonly stats: AllocatorStats;
  /**
   * Free bytes of the device as its driver reported them when the allocator gave up (other processes' memory
   * counted as used); undefined when the device cannot say, and the message then takes capacity minus reserved.
   */
  readonly deviceFreeBytes?: number | undefined;
  /** A sentence appended to the message, e.g. a device limit the request exceeds. */
  readonly hint?: string;
}

/**
 * The device is certainly exhausted: thrown only after the allocator released what it had cached and retried.
 * The message follows c10's: what was asked for, the capacity, what is allocated, reserved and free.
 */
export class OutOfMemoryError extends StowageError {
  readonly device: Device;
  readonly requestedBytes: number;
  readonly capacityBytes: number | undefined;
  readonly budgetBytes: number | undefined;
  readonly stats: AllocatorStats;

  constructor(details: OutOfMemoryDetails, options?: ErrorOptions) {
    super('OUT_OF_MEMORY', describeOutOfMemory(details), options);
    this.device = details.device;
    this.requestedBytes = details.requestedBytes;
    this.capacityBytes = details.capacityBytes;
    this.budgetBytes = details.budgetBytes;
    this.stats = details.stats;
  }
}

export function isOutOfMemoryError(error: unknown): error is OutOfMemoryError {
  return error instanceof OutOfMemoryError;
}

function describeOutOfMemory(d: OutOfMemoryDetails): string {
  const allocated = d.stats['allocated_bytes.all.current'];
  const reserved = d.stats['reserved_bytes.all.current'];
  const cached = Math.max(0, reserved - allocated);
  const capacity =
    d.budgetBytes !== undefined
      ? `the allocator's budget is ${formatBytes(d.budgetBytes)}, of which ${formatBytes(Math.max(0, d.budgetBytes - (d.budgetUsedBytes ?? reserved)))} is free`
      : d.capacityBytes === undefined
        ? "the device's capacity is unknown"
        : `the device has ${formatBytes(d.capacityBytes)} total capacity, of which ${formatBytes(d.deviceFreeBytes ?? Math.max(0, d.capacityBytes - reserved))} is free${d.deviceFreeBytes === undefined ? '' : ' (as its driver reports, other processes included)'}`;
  let message =
    `Out of memory on ${formatDevice(d.device)}: tried to allocate ${formatBytes(d.requestedBytes)}; ${capacity}. ` +
    `${formatBytes(reserved)} is reserved by Stowage, of which ${formatBytes(allocated)} is allocated and ${formatBytes(cached)} is cached but unallocated.`;
  if (d.hint !== undefined) message += ` ${d.hint}`;
  else if (reserved > 0 && cached > reserved / 4 && cached >= d.requestedBytes) {
    message +=
      ' The cached memory is large enough for this request but fragmented: try a smaller max split size or expandable segments.';
  }
  return message;
}
