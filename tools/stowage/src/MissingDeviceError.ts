import { StowageError } from '@stowage/core';

/**
 * `--device` names a device the input has no trace or segments of. Nothing was replayed or written. The command
 * exits with 3, as for any input that does not hold what was asked for.
 */
export class MissingDeviceError extends StowageError {
  /**
   * @param path the input as the user gave it
   * @param device the device index asked for
   * @param devices the device indices the input has, ascending (empty for an input with nothing in it)
   */
  constructor(
    readonly path: string,
    readonly device: number,
    readonly devices: readonly number[],
  ) {
    super(
      'DEVICE_MISMATCH',
      `${path} has nothing on device ${device}; ${devices.length === 0 ? 'it holds no device at all' : `it has device${devices.length === 1 ? '' : 's'} ${devices.join(', ')}`}: give --device ${devices[0] ?? 0}${devices.length > 1 ? ` (or ${devices.slice(1).join(', ')})` : ''}.`,
    );
  }
}
