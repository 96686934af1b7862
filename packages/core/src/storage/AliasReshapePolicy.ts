import type { ReshapePolicy } from '../contracts/ReshapePolicy.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { inferSizes } from '../internal/shape.js';
import { TensorImpl } from './TensorImpl.js';
import { viewStrides } from './viewStrides.js';

/** The default: a view when the layout allows one (PyTorch's rule), otherwise a contiguous copy. */
export class AliasReshapePolicy implements ReshapePolicy {
  readonly name = 'alias';

  /** @throws InvalidArgumentError for a non-tensor, or sizes of another element count */
  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    if (!(tensor instanceof TensorImpl)) throw new InvalidArgumentError('tensor', tensor, 'a TensorImpl');
    const newSizes = inferSizes('sizes', sizes, tensor.numel);
    const strides = viewStrides(tensor.sizes, tensor.strides, newSizes);
    if (strides) return tensor.asStrided(newSizes, strides, tensor.storageOffset);
    return tensor.contiguous().view(newSizes);
  }
}
