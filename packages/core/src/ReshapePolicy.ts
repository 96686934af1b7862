import type { TensorImpl } from './TensorImpl.js';
import type { Token } from './Token.js';
import { viewStrides } from './internal/shape.js';

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

/** The default: a view when the layout allows one (PyTorch's rule), otherwise a contiguous copy. */
export class AliasReshapePolicy implements ReshapePolicy {
  readonly name = 'alias';

  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    const strides = viewStrides(tensor.sizes, tensor.strides, sizes);
    if (strides) return tensor.asStrided(sizes, strides, tensor.storageOffset);
    return tensor.contiguous().view(sizes);
  }
}
