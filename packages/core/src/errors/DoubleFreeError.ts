import { StowageError } from './StowageError.js';

/** A pointer or storage was released twice. The second release changed nothing. */
export class DoubleFreeError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('DOUBLE_FREE', message, options);
  }
}
