import { describeValue } from '../validation/describeValue.js';
import { StowageError } from './StowageError.js';

/** A broken precondition: an argument of the wrong type, range or shape. Nothing was changed. */
export class InvalidArgumentError extends StowageError {
  /**
   * @param argument the parameter's name as the caller wrote it (`nbytes`, `sizes[1]`, `offset`)
   * @param value the value that was passed
   * @param expectation what the value must be, completing "<argument> must be …"
   */
  constructor(
    readonly argument: string,
    readonly value: unknown,
    readonly expectation: string,
    options?: ErrorOptions,
  ) {
    super('INVALID_ARGUMENT', `${argument} must be ${expectation}; got ${describeValue(value)}.`, options);
  }
}
