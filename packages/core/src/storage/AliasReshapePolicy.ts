import type { ReshapePolicy } from '../contracts/ReshapePolicy.js';
import type { TensorImpl } from './TensorImpl.js';
import { viewStrides } from './viewStrides.js';

/** The default: a view when the layout allows one (PyTorch's rule), otherwise a contiguous copy. */
export class AliasReshapePolicy implements ReshapePolicy {
  readonly name = 'alias';

  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    const strides = viewStrides(tensor.sizes, tensor.strides, sizes);
    if (strides) return tensor.asStrided(sizes, strides, tensor.storageOffset);
    return tensor.contiguous().view(sizes);
  }
}
