import { StowageError } from './StowageError.js';

/** The device failed: it was lost, or it rejected memory the allocator had handed out. */
export class DeviceError extends StowageError {
  constructor(message: string, options?: ErrorOptions) {
    super('DEVICE_ERROR', message, options);
  }
}
