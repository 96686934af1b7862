import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** Element types and their sizes in bytes. */
export const DTYPE_ITEMSIZE = Object.freeze({
  bool: 1,
  int8: 1,
  uint8: 1,
  int16: 2,
  float16: 2,
  bfloat16: 2,
  int32: 4,
  uint32: 4,
  float32: 4,
  int64: 8,
  float64: 8,
} as const);

export type DType = keyof typeof DTYPE_ITEMSIZE;

/** @throws InvalidArgumentError for an unknown dtype name. */
export function checkDType(argument: string, value: unknown): DType {
  if (typeof value !== 'string' || !Object.hasOwn(DTYPE_ITEMSIZE, value)) {
    throw new InvalidArgumentError(argument, value, `one of ${Object.keys(DTYPE_ITEMSIZE).join(', ')}`);
  }
  return value as DType;
}

export function itemsizeOf(dtype: DType): number {
  return DTYPE_ITEMSIZE[dtype];
}
