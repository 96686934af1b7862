import type { StorageImpl } from '../storage/StorageImpl.js';

/**
 * The key of the method a DataPtr context implements to act before any write through a storage:
 * `StorageImpl#mutableData` calls `context[BeforeWrite](storage)` when the context has one. COW contexts
 * materialize there, so a lazily cloned storage can never be written in place, whatever plugins a runtime has.
 */
export const BeforeWrite: unique symbol = Symbol('stowage.BeforeWrite');

export interface WriteGuard {
  [BeforeWrite](storage: StorageImpl): void;
}

export function isWriteGuard(context: unknown): context is WriteGuard {
  return typeof context === 'object' && context !== null && typeof (context as Partial<WriteGuard>)[BeforeWrite] === 'function';
}
