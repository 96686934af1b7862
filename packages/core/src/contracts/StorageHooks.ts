import type { StorageImpl } from '../storage/StorageImpl.js';
import type { Token } from './Token.js';

/**
 * Observers of storage access, registered by plugins (COW materializes in `beforeWrite`; the reshape warning
 * mode moves generation numbers). Multi-registered: every registration runs, in registration order.
 */
export interface StorageHooks {
  /** Runs before `data()` hands out the DataPtr for reading. */
  beforeRead?(storage: StorageImpl): void;
  /** Runs before `mutableData()` hands out the DataPtr for writing; may replace the storage's DataPtr. */
  beforeWrite?(storage: StorageImpl): void;
  /** Runs once the storage is constructed (the runtime tracks live storages with it). */
  afterCreate?(storage: StorageImpl): void;
  /** Runs when the storage is released, before its DataPtr is. */
  beforeRelease?(storage: StorageImpl): void;
}

export const StorageHooks: Token<StorageHooks> = Symbol('stowage.StorageHooks');
