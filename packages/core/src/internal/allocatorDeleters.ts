import type { Deleter } from '../DataPtr.js';

/**
 * The deleters of every Stowage allocator in this thread (AllocatorBase, ForwardingAllocator). A pointer whose
 * deleter is one of them was made by an allocator; `Runtime#adopt` refuses such a pointer unless one of its own
 * allocators owns it. Pointers with other deleters (an imported buffer, COW, IPC) are not allocators' to judge.
 */
const deleters = new WeakSet<Deleter>();

export function markAllocatorDeleter<D extends Deleter>(deleter: D): D {
  deleters.add(deleter);
  return deleter;
}

export function isAllocatorDeleter(deleter: Deleter | null): boolean {
  return deleter !== null && deleters.has(deleter);
}
