import { InvalidArgumentError } from '@stowage/core';

/** The usage classes the allocator serves from sub-allocated segments; staging buffers are managed internally. */
export type WebGpuUsage = 'storage' | 'uniform';

/** GPUBufferUsage flags (spec values, so that no global constants are needed in Node). */
export const BufferUsage = {
  MAP_READ: 0x0001,
  MAP_WRITE: 0x0002,
  COPY_SRC: 0x0004,
  COPY_DST: 0x0008,
  UNIFORM: 0x0040,
  STORAGE: 0x0080,
} as const;

/** Segment kinds, one per usage class (Note [Segment kinds] in core's CachingAllocator). */
export const USAGE_KINDS: Record<WebGpuUsage, number> = { storage: 0, uniform: 1 };

/** The GPUBufferUsage flags of a segment of each kind. */
export const KIND_FLAGS: readonly number[] = [
  BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
  BufferUsage.UNIFORM | BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST,
];

/** @throws InvalidArgumentError for a usage the allocator cannot serve */
export function kindOfUsage(usage: string | undefined): number {
  if (usage === undefined) return 0;
  // An own key only: 'toString' or '__proto__' must not find Object.prototype's members.
  const kind = typeof usage === 'string' && Object.hasOwn(USAGE_KINDS, usage) ? (USAGE_KINDS as Record<string, number>)[usage] : undefined;
  if (kind === undefined) {
    throw new InvalidArgumentError(
      'options.usage',
      usage,
      "'storage' or 'uniform' (upload and readback staging buffers are managed by the allocator: use Runtime#write and Runtime#read)",
    );
  }
  return kind;
}
