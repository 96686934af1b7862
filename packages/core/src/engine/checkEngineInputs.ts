import type { AllocateOptions } from '../contracts/Allocator.js';
import type { MemoryBackend } from '../contracts/MemoryBackend.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { checkOptions } from '../validation/validate.js';

// The checks of what callers give the caching engine, kept out of CachingAllocator.ts (Note [Few large functions on
// the hot path] there: code that only builds errors lives in functions of its own).

/**
 * Throws unless `options` is an options object whose keys are AllocateOptions' (a `for…in` over one or two keys:
 * no allocation on the path of a call that passes options).
 */
export function checkAllocateOptions(options: AllocateOptions): void {
  checkOptions('options', options);
  for (const key in options) {
    if (key !== 'stream' && key !== 'usage' && key !== 'shared' && (options as Record<string, unknown>)[key] !== undefined) {
      checkOptions('options', options, ALLOCATE_OPTION_KEYS); // throws, naming the key and the nearest known one
    }
  }
}

const ALLOCATE_OPTION_KEYS: readonly string[] = ['stream', 'usage', 'shared'];

/** Throws unless `backend` looks like a MemoryBackend (a device and the segment methods); constructor only. */
export function checkBackend<H>(backend: MemoryBackend<H>): MemoryBackend<H> {
  const b = backend as Partial<MemoryBackend<H>> | null;
  if (typeof b !== 'object' || b === null || typeof b.device !== 'object' || typeof b.malloc !== 'function' || typeof b.free !== 'function' || typeof b.copy !== 'function') {
    throw new InvalidArgumentError('backend', backend, 'a MemoryBackend (such as new CpuMemoryBackend())');
  }
  return backend;
}
