import { StowageError } from './StowageError.js';

/** A pointer or storage was handed to an allocator or runtime that did not create it. Nothing was changed. */
export class ForeignPointerError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('FOREIGN_POINTER', message, options);
  }
}
