import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** Validates a shape: an array of non-negative safe integers whose product is a safe integer. */
export function checkSizes(argument: string, sizes: unknown): number[] {
  if (!Array.isArray(sizes)) throw new InvalidArgumentError(argument, sizes, 'an array of non-negative integers');
  let numel = 1;
  sizes.forEach((size, i) => {
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      throw new InvalidArgumentError(`${argument}[${i}]`, size, 'a non-negative integer');
    }
    numel *= size;
  });
  if (!Number.isSafeInteger(numel)) throw new InvalidArgumentError(argument, sizes, 'a shape with at most Number.MAX_SAFE_INTEGER elements');
  return [...sizes] as number[];
}

/** Validates strides for a shape of `rank` dimensions: non-negative safe integers. */
export function checkStrides(argument: string, strides: unknown, rank: number): number[] {
  if (!Array.isArray(strides) || strides.length !== rank) {
    throw new InvalidArgumentError(argument, strides, `an array of ${rank} non-negative integers (one per dimension)`);
  }
  strides.forEach((stride, i) => {
    if (typeof stride !== 'number' || !Number.isSafeInteger(stride) || stride < 0) {
      throw new InvalidArgumentError(`${argument}[${i}]`, stride, 'a non-negative integer');
    }
  });
  return [...strides] as number[];
}

export function numelOf(sizes: readonly number[]): number {
  let n = 1;
  for (const s of sizes) n *= s;
  return n;
}

/** Row-major strides for `sizes` (a size-0 or size-1 dimension gets the stride it would have at size 1). */
export function contiguousStrides(sizes: readonly number[]): number[] {
  const strides = new Array<number>(sizes.length);
  let stride = 1;
  for (let d = sizes.length - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= Math.max(sizes[d]!, 1);
  }
  return strides;
}

/** True when the layout is row-major contiguous (dimensions of size 1 may have any stride). */
export function isContiguousLayout(sizes: readonly number[], strides: readonly number[]): boolean {
  if (numelOf(sizes) === 0) return true;
  let expected = 1;
  for (let d = sizes.length - 1; d >= 0; d--) {
    if (sizes[d] === 1) continue;
    if (strides[d] !== expected) return false;
    expected *= sizes[d]!;
  }
  return true;
}

/**
 * Elements from the first to one past the last element the layout touches: the storage extent it needs,
 * in elements from the storage offset. 0 for an empty tensor.
 */
export function extentOf(sizes: readonly number[], strides: readonly number[]): number {
  if (numelOf(sizes) === 0) return 0;
  let last = 0;
  sizes.forEach((size, d) => (last += (size - 1) * strides[d]!));
  return last + 1;
}

/**
 * Replaces one `-1` in `sizes` by the size that makes the element count `numel`.
 * @throws InvalidArgumentError when there is more than one -1, or no size fits
 */
export function inferSizes(argument: string, sizes: unknown, numel: number): number[] {
  if (!Array.isArray(sizes)) throw new InvalidArgumentError(argument, sizes, 'an array of sizes');
  const inferred = sizes.indexOf(-1);
  if (inferred !== sizes.lastIndexOf(-1)) throw new InvalidArgumentError(argument, sizes, 'a shape with at most one -1');
  const known = checkSizes(argument, inferred < 0 ? sizes : sizes.filter((_, i) => i !== inferred));
  const knownNumel = numelOf(known);
  if (inferred >= 0) {
    if (knownNumel === 0 || numel % knownNumel !== 0) {
      throw new InvalidArgumentError(argument, sizes, `a shape whose element count can be ${numel}`);
    }
    known.splice(inferred, 0, numel / knownNumel);
    return known;
  }
  if (knownNumel !== numel) throw new InvalidArgumentError(argument, sizes, `a shape of ${numel} elements, like the tensor's`);
  return known;
}
