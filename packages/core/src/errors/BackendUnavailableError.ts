import { StowageError } from './StowageError.js';

/** No allocator is registered for a device, or its driver could not be loaded. */
export class BackendUnavailableError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('BACKEND_UNAVAILABLE', message, options);
  }
}
