import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** Throws unless `value` is an integer in [0, Number.MAX_SAFE_INTEGER]. */
export function checkByteCount(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(argument, value, 'a whole number of bytes in [0, Number.MAX_SAFE_INTEGER]');
  }
  return value;
}

/** Throws unless `value` is an integer in [0, Number.MAX_SAFE_INTEGER]; for counts that are not bytes. */
export function checkCount(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(argument, value, 'a non-negative safe integer');
  }
  return value;
}

/** Throws unless `[offset, offset + length)` lies inside `[0, limit)`. */
export function checkRange(argument: string, offset: number, length: number, limit: number, what: string): void {
  if (offset + length > limit) {
    throw new InvalidArgumentError(
      argument,
      offset + length,
      `at most the ${what}'s ${limit} bytes (offset ${offset} + length ${length} runs past the end)`,
    );
  }
}

/** Returns the bytes of an ArrayBufferView without copying; throws for anything else. */
export function checkBytes(argument: string, value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw new InvalidArgumentError(argument, value, 'a Uint8Array or another ArrayBufferView');
}

/** Throws unless `value` is an options object (undefined is taken as `{}` by the callers' defaults). */
export function checkOptions<T extends object>(argument: string, value: T): T {
  if (typeof value !== 'object' || value === null) throw new InvalidArgumentError(argument, value, 'an options object (or nothing)');
  return value;
}
