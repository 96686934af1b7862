import { StowageError } from './StowageError.js';

/** A released storage, pointer or tensor was used. Nothing was changed. */
export class UseAfterReleaseError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('USE_AFTER_RELEASE', message, options);
  }
}
