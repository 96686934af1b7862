/** LMS residency states (see DESIGN.md "LMS"). */
export type LmsState = 'allocated' | 'active' | 'inactive' | 'reclaimed';

/**
 * The object an allocator hands to every StorageImpl it backs when Large Model Support is on
 * (`Allocator.asLmsStorage`). `@stowage/lms` implements it; core only calls these members.
 */
export interface LmsStorage {
  readonly state: LmsState;
  /** Makes the storage resident and keeps it so until the matching `unpin()`. Pins nest. */
  pin(): void;
  /** Ends one pin; the storage becomes reclaimable when the count reaches zero. */
  unpin(): void;
  /** The storage is being released; drop every reference to its memory. Never called while pinned. */
  release(): void;
}
