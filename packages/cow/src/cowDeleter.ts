import type { Deleter } from '@stowage/core/plugin-kit';
import { DataPtr } from '@stowage/core';
import type { CowContext } from './CowContext.js';

/**
 * The deleter of every COW DataPtr: drops its context reference and frees the data with the last one, or, in
 * the thread that shared the data, when only its sharing pin is left (Note [COW across threads]).
 */
export const cowDeleter: Deleter = (context) => {
  const cow = context as CowContext;
  const left = cow.decref();
  if (left === 0) cow.originalDeleter?.(cow.originalContext);
  else if (left === 1) cow.releasePinIfLast();
};

/** True when `ptr` shares its data through a COW context (it, or a storage over it, was lazily cloned). */
export function isCowDataPtr(ptr: DataPtr): boolean {
  return ptr instanceof DataPtr && ptr.deleter === cowDeleter;
}
