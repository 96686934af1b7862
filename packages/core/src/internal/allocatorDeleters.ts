import type { Deleter } from '../storage/DataPtr.js';

/**
 * Marks the deleter of a Stowage allocator (AllocatorBase, ForwardingAllocator). A pointer whose deleter is
 * marked was made by an allocator; `Runtime#adopt` refuses such a pointer unless one of its own allocators owns
 * it. Pointers with other deleters (an imported buffer, COW, IPC) are not allocators' to judge.
 *
 * The mark is a property of the deleter itself, not an entry in a module-level registry: each allocator carries
 * its own, so no state is shared between runtimes (or between two copies of core: the key is a registered
 * symbol).
 */
const ALLOCATOR_DELETER = Symbol.for('stowage.allocatorDeleter');

type MarkedDeleter = Deleter & { readonly [ALLOCATOR_DELETER]?: true };

export function markAllocatorDeleter<D extends Deleter>(deleter: D): D {
  Object.defineProperty(deleter, ALLOCATOR_DELETER, { value: true });
  return deleter;
}

/**
 * True when `deleter` is a Stowage allocator's (its pointer was made by an allocator, which frees it): what a plugin
 * that takes ownership of pointers (IPC's sent data) checks before it wraps one.
 */
export function isAllocatorDeleter(deleter: Deleter | null): boolean {
  return deleter !== null && (deleter as MarkedDeleter)[ALLOCATOR_DELETER] === true;
}
