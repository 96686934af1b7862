import { InvalidArgumentError } from '@stowage/core';

/** A host↔device link as the simulated copy engines see it: each direction has this bandwidth on its own. */
export interface LinkProfile {
  /** Bytes per second in one direction; a positive safe integer. */
  readonly bytesPerSecond: number;
  /** Fixed cost of one copy before its first byte moves (DMA setup, round trips), in nanoseconds. */
  readonly latencyNs: number;
}

export type LinkName = 'pcie3' | 'pcie4' | 'pcie5' | 'nvlink2' | 'c2c';

/**
 * Note [Link profiles]: bandwidths are the nominal per-direction figures (decimal GB/s); a tuned real copy
 * reaches about 80 % of PCIe's, so a simulated run is a lower bound on copy time.
 * - `pcie4`: PCIe 4.0 x16, 16 GT/s × 16 lanes, 128b/130b coding: 31.5 GB/s, rounded to 32 GB/s.
 * - `pcie5`: PCIe 5.0 x16, twice PCIe 4.0: 64 GB/s.
 * - `c2c`: NVLink-C2C between Grace and Hopper (GH200), 900 GB/s both ways together: 450 GB/s each way.
 * - `pcie3`: PCIe 3.0 x16, 8 GT/s × 16 lanes, 128b/130b coding: 15.75 GB/s, rounded to 16 GB/s (the published
 *   swapping systems' hosts: vDNN's, Capuchin's).
 * - `nvlink2`: NVLink 2.0 between a POWER9 host and a V100 in IBM's AC922 (TFLMS's machine). IBM's AC922 Redpaper
 *   (REDP-5472) gives each GPU of the 4-GPU configuration three NVLink 2.0 bricks to its CPU, 150 GB/s both ways
 *   together: 3 × 25 GB/s = 75 GB/s each way, the figure taken here. (IBM's TFLMS case-study article words the same
 *   150 GB/s as "in each direction"; taken at its word it would double this.)
 * Latencies are estimates, not measurements: a small `cudaMemcpyAsync` over PCIe takes a few microseconds end
 * to end, most of it DMA-engine setup and PCIe round trips that do not shrink with the link generation, so both
 * PCIe profiles take 2 µs; the coherent C2C and NVLink 2.0 links have shorter round trips, and the copy-engine
 * setup that remains is taken as 1 µs.
 */
export const LINK_PROFILES: Readonly<Record<LinkName, LinkProfile>> = Object.freeze({
  pcie3: Object.freeze({ bytesPerSecond: 16e9, latencyNs: 2000 }),
  nvlink2: Object.freeze({ bytesPerSecond: 75e9, latencyNs: 1000 }),
  pcie4: Object.freeze({ bytesPerSecond: 32e9, latencyNs: 2000 }),
  pcie5: Object.freeze({ bytesPerSecond: 64e9, latencyNs: 2000 }),
  c2c: Object.freeze({ bytesPerSecond: 450e9, latencyNs: 1000 }),
});

/**
 * The profile `link` names, or `link` itself when it is a valid custom profile (a new frozen object).
 * @throws InvalidArgumentError for an unknown name, a bandwidth that is not a positive safe integer, or a latency
 * that is not a non-negative safe integer
 */
export function resolveLink(link: LinkName | LinkProfile): LinkProfile {
  if (typeof link === 'string') {
    if (Object.hasOwn(LINK_PROFILES, link)) return LINK_PROFILES[link];
    throw new InvalidArgumentError('options.link', link, "'pcie3', 'pcie4', 'pcie5', 'nvlink2', 'c2c' or { bytesPerSecond, latencyNs }");
  }
  if (typeof link !== 'object' || link === null) {
    throw new InvalidArgumentError('options.link', link, "'pcie3', 'pcie4', 'pcie5', 'nvlink2', 'c2c' or { bytesPerSecond, latencyNs }");
  }
  const { bytesPerSecond, latencyNs } = link;
  if (!Number.isSafeInteger(bytesPerSecond) || bytesPerSecond <= 0) {
    throw new InvalidArgumentError('options.link.bytesPerSecond', bytesPerSecond, 'a positive whole number of bytes per second');
  }
  if (!Number.isSafeInteger(latencyNs) || latencyNs < 0) {
    throw new InvalidArgumentError('options.link.latencyNs', latencyNs, 'a non-negative whole number of nanoseconds');
  }
  return Object.freeze({ bytesPerSecond, latencyNs });
}

/** Nanoseconds one copy of `byteLength` bytes takes on `link`: latency + bytes / bandwidth, rounded up, exactly. */
export function copyDurationNs(link: LinkProfile, byteLength: number): number {
  const bytesPerSecond = BigInt(link.bytesPerSecond);
  const transferNs = (BigInt(byteLength) * 1_000_000_000n + bytesPerSecond - 1n) / bytesPerSecond;
  return link.latencyNs + Number(transferNs);
}
