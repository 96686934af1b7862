/**
 * LMS residency states (see DESIGN.md "LMS"): `allocated` (made, never pinned), `active` (pinned), `inactive`
 * (unpinned and resident: on the reclaim list), `reclaimed` (its bytes are in host memory, its device memory freed).
 */
export type LmsState = 'allocated' | 'active' | 'inactive' | 'reclaimed';

/**
 * The object an allocator hands to every StorageImpl it backs when Large Model Support is on
 * (`Allocator.asLmsStorage`). `@stowage/lms` implements it; core only calls these members.
 */
export interface LmsStorage {
  readonly state: LmsState;
  /**
   * Makes the storage resident and keeps it so until the matching `unpin()`. Pins nest.
   * @throws when a reclaimed storage's bytes are still on their way to the host (await `ready()` first), or when
   * the device has no room for it even after reclaiming everything else (OutOfMemoryError): nothing changes
   */
  pin(): void;
  /** Ends one pin; the storage becomes reclaimable when the count reaches zero. */
  unpin(): void;
  /**
   * Called by `StorageImpl.data()` (`write` false) and `mutableData()` (`write` true) before they hand out the
   * pointer: a reclaimed storage is brought back first, and a write drops any host copy of the bytes. The pointer
   * handed out stays valid only while the storage is pinned, or until the next allocation on its device.
   * @throws as `pin()`
   */
  access(write: boolean): void;
  /** Resolves once `pin()` and `access()` can bring the storage back without waiting for a transfer. */
  ready(): Promise<void>;
  /**
   * A reclaimed storage's bytes read from its host copy (once its page-out has reached the host), without bringing
   * it back: `runtime.read` then needs no device memory and no transfer. Null when the storage is not reclaimed.
   * Default (absent): `runtime.read` brings the storage back and reads the device.
   */
  readHostCopy?(): Promise<Uint8Array> | null;
  /** The storage is being released; drop every reference to its memory. Never called while pinned. */
  release(): void;
}
