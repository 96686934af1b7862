import type { Allocator } from './Allocator.js';
import type { Device } from './Device.js';
import type { Token } from './Token.js';

/**
 * Makes the allocator for each device of one type, on first use. Multi-registered: a plugin registers one per
 * device type it serves; for a type registered twice, the later registration wins.
 */
export interface AllocatorFactory {
  readonly deviceType: string;
  /**
   * @throws BackendUnavailableError when the device does not exist or its driver cannot be used
   */
  create(device: Device): Allocator;
}

export const AllocatorFactory: Token<AllocatorFactory> = Symbol('stowage.AllocatorFactory');
