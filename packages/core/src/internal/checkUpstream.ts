import type { Allocator } from '../contracts/Allocator.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** Throws unless `value` looks like an {@link Allocator} (has `allocate`, `free` and `memoryStats`); for adaptors' constructors. */
export function checkUpstream(value: unknown): Allocator {
  const candidate = value as Partial<Allocator> | null | undefined;
  if (
    typeof candidate !== 'object' ||
    candidate === null ||
    typeof candidate.allocate !== 'function' ||
    typeof candidate.free !== 'function' ||
    typeof candidate.memoryStats !== 'function'
  ) {
    throw new InvalidArgumentError('upstream', value, 'an Allocator');
  }
  return candidate as Allocator;
}
