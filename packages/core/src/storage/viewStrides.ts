import { checkSizes, checkStrides, contiguousStrides, numelOf } from '../internal/shape.js';

/**
 * Strides that let a tensor of `oldSizes`/`oldStrides` be viewed as `newSizes` without copying, or null when no
 * such strides exist. Same result as PyTorch's `computeStride`: dimensions are matched in chunks of
 * memory-contiguous dimensions, and each chunk must split exactly into new dimensions.
 * @throws InvalidArgumentError when a size or stride is not a non-negative safe integer, or `oldStrides` has
 * another length than `oldSizes`
 */
export function viewStrides(oldSizes: readonly number[], oldStrides: readonly number[], newSizes: readonly number[]): number[] | null {
  checkSizes('oldSizes', oldSizes);
  checkStrides('oldStrides', oldStrides, oldSizes.length);
  checkSizes('newSizes', newSizes);
  if (oldSizes.length === 0) return newSizes.map(() => 1);
  const numel = numelOf(oldSizes);
  if (numel === 0) {
    return oldSizes.length === newSizes.length && oldSizes.every((s, i) => s === newSizes[i]) ? [...oldStrides] : contiguousStrides(newSizes);
  }
  const newStrides = new Array<number>(newSizes.length);
  let viewD = newSizes.length - 1;
  let chunkBaseStride = oldStrides[oldStrides.length - 1]!;
  let tensorNumel = 1;
  let viewNumel = 1;
  for (let tensorD = oldSizes.length - 1; tensorD >= 0; tensorD--) {
    tensorNumel *= oldSizes[tensorD]!;
    const chunkEnds = tensorD === 0 || (oldSizes[tensorD - 1] !== 1 && oldStrides[tensorD - 1] !== tensorNumel * chunkBaseStride);
    if (!chunkEnds) continue;
    while (viewD >= 0 && (viewNumel < tensorNumel || newSizes[viewD] === 1)) {
      newStrides[viewD] = viewNumel * chunkBaseStride;
      viewNumel *= newSizes[viewD]!;
      viewD--;
    }
    if (viewNumel !== tensorNumel) return null;
    if (tensorD > 0) {
      chunkBaseStride = oldStrides[tensorD - 1]!;
      tensorNumel = 1;
      viewNumel = 1;
    }
  }
  return viewD === -1 ? newStrides : null;
}
