import { InvalidArgumentError } from '@stowage/core';

/**
 * A fault in a `PYTORCH_CUDA_ALLOC_CONF`-style string (Note [PyTorch's messages] in AllocatorConf.ts). The code is
 * `INVALID_ARGUMENT`, as for every broken precondition; `message` is PyTorch's own text for the same fault where
 * PyTorch has one, so that a message found in PyTorch's issues and forums matches.
 */
export class AllocatorConfError extends InvalidArgumentError {
  /** The key the fault is in (as written, an alias included), or `undefined` when the string fails before any key. */
  readonly key: string | undefined;
  /** The offending token (a value, or the unknown key itself), or `undefined` when the token is missing. */
  declare readonly value: string | undefined;

  /**
   * @param key the key being parsed, or the unrecognized key
   * @param value the offending token
   * @param message the whole message (PyTorch's text for the fault)
   */
  constructor(key: string | undefined, value: string | undefined, message: string, options?: ErrorOptions) {
    super(key ?? 'the allocator configuration', value, 'a valid PYTORCH_CUDA_ALLOC_CONF setting', options);
    this.key = key;
    this.message = message;
  }
}

/** True when `error` is an {@link AllocatorConfError}. */
export function isAllocatorConfError(error: unknown): error is AllocatorConfError {
  return error instanceof AllocatorConfError;
}
