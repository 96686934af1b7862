import type { MemoryBackend } from '../contracts/MemoryBackend.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

// The check of the backend the caching engine is built on, kept out of CachingAllocator.ts (Note [Few large
// functions on the hot path] there: code that only builds errors lives in functions of its own). The check of
// `allocate`'s options, which every allocator shares, is validation/validate.ts's checkAllocateOptions.

/** Throws unless `backend` looks like a MemoryBackend (a device and the segment methods); constructor only. */
export function checkBackend<H>(backend: MemoryBackend<H>): MemoryBackend<H> {
  const b = backend as Partial<MemoryBackend<H>> | null;
  if (typeof b !== 'object' || b === null || typeof b.device !== 'object' || typeof b.malloc !== 'function' || typeof b.free !== 'function' || typeof b.copy !== 'function') {
    throw new InvalidArgumentError('backend', backend, 'a MemoryBackend (such as new CpuMemoryBackend())');
  }
  return backend;
}
