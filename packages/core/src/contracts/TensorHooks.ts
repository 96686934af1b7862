import type { TensorImpl } from '../storage/TensorImpl.js';
import type { Token } from './Token.js';

/**
 * Observers of tensor-level data access (`TensorImpl#data`, `#mutableData`), registered by plugins: the
 * reshape warning mode compares generation numbers here. Multi-registered; run in registration order, before
 * the storage's own access path.
 */
export interface TensorHooks {
  beforeRead?(tensor: TensorImpl): void;
  beforeWrite?(tensor: TensorImpl): void;
}

export const TensorHooks: Token<TensorHooks> = Symbol('stowage.TensorHooks');
