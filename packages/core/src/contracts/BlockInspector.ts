import type { DataPtr } from '../storage/DataPtr.js';
import type { BlockPlacement } from './BlockPlacement.js';
import type { Token } from './Token.js';

/**
 * A device service: where a live pointer's block sits in its segment, for LMS policies choosing what to reclaim.
 * A device plugin over the caching engine registers the engine under this token for each of its devices.
 */
export interface BlockInspector {
  /**
   * The block behind `ptr`, also when adaptors (a `ForwardingAllocator` and its subclasses) have taken over its
   * deleter; undefined for a pointer the engine did not place (released, imported, zero bytes, shared by COW or
   * IPC, another allocator's).
   */
  describeBlock(ptr: DataPtr): BlockPlacement | undefined;
}

export const BlockInspector: Token<BlockInspector> = Symbol('stowage.BlockInspector');
