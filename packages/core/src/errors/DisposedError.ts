import { StowageError } from './StowageError.js';

/** An allocator or runtime was used after `dispose()`. */
export class DisposedError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('DISPOSED', message, options);
  }
}
