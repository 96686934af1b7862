import type { ReshapePolicy } from '@stowage/core';
import { InvalidArgumentError, TensorImpl } from '@stowage/core';
import { viewStrides } from '@stowage/core/plugin-kit';
import { lazyClone } from './lazyClone.js';

/**
 * `reshape` always returns a copy, lazily when it can: a layout that is viewable becomes a view of a lazy clone
 * of the storage (O(1); copied only when either side writes), any other layout a contiguous copy. The output
 * never aliases the input, so programs see copy semantics whatever the strides.
 */
export class CowReshapePolicy implements ReshapePolicy {
  readonly name = 'cow';

  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    if (!(tensor instanceof TensorImpl)) throw new InvalidArgumentError('tensor', tensor, 'a TensorImpl');
    const strides = viewStrides(tensor.sizes, tensor.strides, sizes);
    if (strides === null) return tensor.clone().view(sizes);
    const storage = lazyClone(tensor.storage);
    if (storage === null) return tensor.clone().view(sizes); // data COW cannot own: copy now
    return tensor.withStorage(storage, { sizes, strides, storageOffset: tensor.storageOffset });
  }
}
