/**
 * Request rounding and segment sizing, after PyTorch's CUDA caching allocator:
 * - every request rounds up to a multiple of 512 bytes (minimum 512), or, with power-of-two divisions
 *   configured for its size interval, to the next of N equal divisions between two powers of two;
 * - a request up to 1 MiB is "small" and is served from 2 MiB segments;
 * - a larger request under 10 MiB is served from 20 MiB segments;
 * - anything larger gets a segment of its size rounded up to 2 MiB.
 */
export const MIN_BLOCK_BYTES = 512;
export const SMALL_REQUEST_MAX_BYTES = 1 << 20;
export const SMALL_SEGMENT_BYTES = 2 << 20;
export const LARGE_SEGMENT_BYTES = 20 << 20;
export const MIN_LARGE_ALLOC_BYTES = 10 << 20;
export const LARGE_ROUNDING_BYTES = 2 << 20;

/** Power-of-two division intervals: [1 MiB, 2 MiB), [2 MiB, 4 MiB), … the last one open-ended (16 in all). */
export const ROUNDUP_INTERVALS = 16;
const FIRST_INTERVAL_LOG2 = 20;

/** floor(log2(n)) for n >= 1, exact for any safe integer. */
export function log2Floor(n: number): number {
  return n < 2 ** 31 ? 31 - Math.clz32(n) : Math.floor(Math.log2(n));
}

function isPowerOfTwo(n: number): boolean {
  return n > 0 && 2 ** log2Floor(n) === n;
}

/** Divisions configured for a request of `bytes` (0 or 1: none). */
export function divisionsFor(bytes: number, divisions: readonly number[]): number {
  const log = log2Floor(bytes);
  const index = Math.min(log > FIRST_INTERVAL_LOG2 ? log - FIRST_INTERVAL_LOG2 : 0, ROUNDUP_INTERVALS - 1);
  return divisions[index] ?? 0;
}

/** Rounds `bytes` up to the next of `divisions` equal steps between the powers of two around it. */
export function roundUpToDivision(bytes: number, divisions: number): number {
  if (isPowerOfTwo(bytes)) return bytes;
  const floor = 2 ** log2Floor(bytes);
  const step = floor / 2 ** log2Floor(divisions);
  if (step < 1) return floor * 2;
  const rounded = Math.floor(bytes / step) * step;
  return rounded === bytes ? bytes : rounded + step;
}

/** The block size a request of `bytes` occupies. */
export function roundSize(bytes: number, divisions: readonly number[]): number {
  if (bytes < MIN_BLOCK_BYTES) return MIN_BLOCK_BYTES;
  const d = divisions.length === 0 ? 0 : divisionsFor(bytes, divisions);
  if (d > 1 && bytes > MIN_BLOCK_BYTES * d) return roundUpToDivision(bytes, d);
  return Math.ceil(bytes / MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES;
}

/** True when a block of `roundedBytes` belongs to the small pool. */
export function isSmallRequest(roundedBytes: number): boolean {
  return roundedBytes <= SMALL_REQUEST_MAX_BYTES;
}

/** The segment size the engine asks the backend for when no cached block fits `roundedBytes`. */
export function segmentSize(roundedBytes: number): number {
  if (roundedBytes <= SMALL_REQUEST_MAX_BYTES) return SMALL_SEGMENT_BYTES;
  if (roundedBytes < MIN_LARGE_ALLOC_BYTES) return LARGE_SEGMENT_BYTES;
  return Math.ceil(roundedBytes / LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES;
}
