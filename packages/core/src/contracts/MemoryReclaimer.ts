import type { Device } from './Device.js';
import type { Token } from './Token.js';

/**
 * Frees device memory that something other than the allocator holds, when the caching engine has nothing left
 * to release. Registered under `IpcCollector` (IPC's limbo) and `LmsReclaimer` (inactive LMS storages); the
 * engine calls IPC first, then LMS, retrying the allocation after each one that freed something.
 */
export interface MemoryReclaimer {
  /**
   * Frees what it can toward `requestedBytes` on `device`, synchronously, through the allocator's normal free
   * path. Returns the bytes freed (0 when nothing).
   */
  reclaim(device: Device, requestedBytes: number): number;
}

/** IPC's limbo collection. */
export const IpcCollector: Token<MemoryReclaimer> = Symbol('stowage.IpcCollector');
/** LMS's reclaim of inactive storages. */
export const LmsReclaimer: Token<MemoryReclaimer> = Symbol('stowage.LmsReclaimer');
