import type { AllocatorStats } from './AllocatorStats.js';
import type { DataPtr } from '../storage/DataPtr.js';
import type { DeviceError } from '../errors/DeviceError.js';

/**
 * What an allocator reports, past tense, one readonly payload each (c10 TraceEntry vocabulary). Listeners run
 * after the allocator's state is consistent again; a listener that throws does not undo the operation, and its
 * error is re-emitted as `listenerFailed`.
 */
export interface AllocatorEvents {
  allocated: [e: { readonly ptr: DataPtr; readonly requestedBytes: number }];
  /**
   * The caller freed `ptr`. `pending`: the block still waits on work that uses it (other streams, a WebGPU
   * submit) before it can be reused; `freeCompleted` follows when it can. Absent or false: the free is complete.
   */
  freed: [e: { readonly ptr: DataPtr; readonly pending?: boolean }];
  /** A free that was `pending` completed: the block at `address` (its `allocated` address) can be reused. */
  freeCompleted: [e: { readonly address: number; readonly requestedBytes: number }];
  segmentReserved: [e: { readonly address: number; readonly bytes: number }];
  segmentReleased: [e: { readonly address: number; readonly bytes: number }];
  outOfMemory: [e: { readonly requestedBytes: number; readonly stats: AllocatorStats }];
  listenerFailed: [e: { readonly event: string; readonly error: unknown }];
  /** The device failed under live allocations (a rejected segment, a lost device): their memory is gone. */
  deviceError: [e: { readonly error: DeviceError; readonly ptrs: readonly DataPtr[] }];
}
