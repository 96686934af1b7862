import type { TensorImpl } from '../storage/TensorImpl.js';
import type { Token } from './Token.js';

/**
 * Decides what `TensorImpl#reshape` returns. Registered under the `ReshapePolicy` token; `@stowage/cow`
 * registers the lazy-copy and warning policies.
 */
export interface ReshapePolicy {
  readonly name: string;
  /**
   * Returns a tensor of `sizes` (already validated: no -1, same element count) with the elements of `tensor`
   * in row-major order: a view sharing its storage, or a tensor over a new storage.
   */
  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl;
}

export const ReshapePolicy: Token<ReshapePolicy> = Symbol('stowage.ReshapePolicy');
