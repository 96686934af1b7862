import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** The device types Stowage ships allocators for; a third party may use any other lowercase name. */
export type KnownDeviceType = 'cpu' | 'cuda' | 'webgpu';
export type DeviceType = KnownDeviceType | (string & {});

/** A device: its type and its ordinal among devices of that type. */
export interface Device {
  readonly type: DeviceType;
  readonly index: number;
}

/** A device as users write it: `'cpu'`, `'webgpu:0'`, `'cuda:1'`, or a {@link Device}. `'cuda'` means index 0. */
export type DeviceLike = string | Device;

const DEVICE_TEXT = /^([a-z][a-z0-9_-]*)(?::(\d+))?$/;

/**
 * Parses a {@link DeviceLike} into a frozen {@link Device}.
 * @throws InvalidArgumentError when the text is not `type` or `type:index`, or the index is not a safe integer.
 */
export function parseDevice(device: DeviceLike, argument = 'device'): Device {
  if (typeof argument !== 'string') throw new InvalidArgumentError('argument', argument, "the name of the argument being parsed, for messages (default 'device')");
  if (typeof device === 'string') {
    const match = DEVICE_TEXT.exec(device);
    if (!match) throw new InvalidArgumentError(argument, device, "a device such as 'cpu', 'webgpu:0' or 'cuda:1'");
    return makeDevice(match[1]!, match[2] === undefined ? 0 : Number(match[2]), argument);
  }
  if (typeof device === 'object' && device !== null && typeof device.type === 'string') {
    if (!DEVICE_TEXT.test(device.type) || device.type.includes(':')) {
      throw new InvalidArgumentError(`${argument}.type`, device.type, 'a lowercase device type such as "cpu"');
    }
    return makeDevice(device.type, device.index, argument);
  }
  throw new InvalidArgumentError(argument, device, "a device such as 'cpu', 'webgpu:0' or { type: 'cuda', index: 1 }");
}

/** Whether `type` is a device type as devices spell it: lowercase, such as 'cpu', 'webgpu' or 'cuda'. */
export function isDeviceType(type: unknown): type is string {
  return typeof type === 'string' && DEVICE_TEXT.test(type) && !type.includes(':');
}

function makeDevice(type: string, index: unknown, argument: string): Device {
  if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0) {
    throw new InvalidArgumentError(`${argument}.index`, index, 'a non-negative integer');
  }
  return Object.freeze({ type, index });
}

/**
 * `'cpu:0'`, `'cuda:1'`: the canonical text of a device, usable as a map key.
 * @throws InvalidArgumentError for something that is not a Device (parse text with `parseDevice` first)
 */
export function formatDevice(device: Device): string {
  if (typeof device !== 'object' || device === null || typeof device.type !== 'string' || typeof device.index !== 'number') {
    throw new InvalidArgumentError('device', device, "a Device ({ type, index }); parse text such as 'cuda:1' with parseDevice first");
  }
  return `${device.type}:${device.index}`;
}

export function isSameDevice(a: Device, b: Device): boolean {
  return a.type === b.type && a.index === b.index;
}
