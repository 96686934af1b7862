import type { ForwardingAllocatorOptions } from '../allocators/ForwardingAllocator.js';
import { checkBoolean, checkOptions } from '../validation/validate.js';

/**
 * Checks an adaptor's options object in its constructor: an object (or nothing) whose keys are `ownsUpstream` and
 * the adaptor's own, with `ownsUpstream` a boolean. Checks once, at construction; never per call.
 * @throws InvalidArgumentError for options that are not an object, an unknown key (naming the nearest known one)
 * or an `ownsUpstream` that is not a boolean
 */
export function checkAdaptorOptions<O extends ForwardingAllocatorOptions>(options: O | undefined, ownKeys: readonly (keyof O & string)[] = []): O {
  const checked = checkOptions('options', options, ['ownsUpstream', ...ownKeys]);
  checkBoolean('options.ownsUpstream', checked.ownsUpstream);
  return checked;
}
