import type { Device } from './Device.js';
import type { StreamId } from './MemoryBackend.js';
import type { Token } from './Token.js';

/** The request a reclaimer frees memory for: a freed block serves it only if of the same pool, kind and stream. */
export interface ReclaimTarget {
  /** True for the small pool (requests of at most 1 MiB, unless the engine unifies its pools). */
  readonly small: boolean;
  /** The backend's segment kind the request needs. */
  readonly kind: number;
  readonly stream: StreamId;
}

/**
 * Frees device memory that something other than the allocator holds, when the caching engine has nothing left
 * to release. Registered under `IpcCollector` (IPC's limbo) and `LmsReclaimer` (inactive LMS storages); the
 * engine calls IPC first, then LMS, retrying the allocation after each one that freed something.
 */
export interface MemoryReclaimer {
  /**
   * Frees what it can toward `requestedBytes` on `device`, synchronously, through the allocator's normal free
   * path. Returns the bytes freed (0 when nothing). The engine asks again, after a retry, while each call frees
   * something, so a reclaimer may free a little at a time. `target` (from the caching engine) says what the freed
   * blocks must suit.
   */
  reclaim(device: Device, requestedBytes: number, target?: ReclaimTarget): number;
}

/** IPC's limbo collection. */
export const IpcCollector: Token<MemoryReclaimer> = Symbol('stowage.IpcCollector');
/** LMS's reclaim of inactive storages. */
export const LmsReclaimer: Token<MemoryReclaimer> = Symbol('stowage.LmsReclaimer');
