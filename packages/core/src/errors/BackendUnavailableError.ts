import { StowageError } from './StowageError.js';

/**
 * No allocator is registered for a device, its driver could not be loaded, or a service a call needs is not in the
 * runtime (its plugin was not given to `createRuntime`).
 */
export class BackendUnavailableError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('BACKEND_UNAVAILABLE', message, options);
  }
}
