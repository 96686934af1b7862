import { StowageError } from './StowageError.js';

/** Two operands that must live on one device do not. Nothing was changed. */
export class DeviceMismatchError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('DEVICE_MISMATCH', message, options);
  }
}
