import type { CachingAllocatorOptions } from '@stowage/core';
import { CachingAllocator, InvalidArgumentError, parseBytes } from '@stowage/core';
import { nearestName } from '@stowage/core/plugin-kit';
import { VirtualMemoryBackend } from '@stowage/core/testing';

/** A named caching-engine configuration a trace can be replayed against. */
export interface AllocatorConfig {
  readonly name: string;
  /** One line for `--help` and the summary. */
  readonly description: string;
  readonly options: CachingAllocatorOptions;
}

/** The configurations `--allocator` names, the default first. */
export const ALLOCATOR_CONFIGS: readonly AllocatorConfig[] = [
  { name: 'pytorch', description: "PyTorch's CUDA caching allocator, rule for rule (the parity preset)", options: { preset: 'pytorch' } },
  { name: 'best', description: "Stowage's default: expandable segments, unified pools, deferred coalescing", options: { preset: 'best' } },
  { name: 'pytorch-expandable', description: "PyTorch's rules with expandable_segments:True", options: { preset: 'pytorch', expandableSegments: true } },
  { name: 'max-split-128', description: "PyTorch's rules with max_split_size_mb:128 (blocks of 128 MiB and more are never split)", options: { preset: 'pytorch', maxSplitSize: '128MiB' } },
];

/** How the virtual device under a replay is sized. */
export interface DeviceOptions {
  /** Device capacity in bytes (`'80GiB'`), or undefined for a device that never runs out. */
  readonly capacity?: string | undefined;
  /** The engine's memory limit (`'8GiB'`), or undefined for none. */
  readonly limit?: string | undefined;
  /**
   * Streams the device serves (ordinals 0 … streams-1): a replay with `--streams` needs one per distinct stream
   * of the trace (`traceSummary(events).streams`). Default 1.
   */
  readonly streams?: number | undefined;
}

/**
 * The configuration named `name`.
 * @throws InvalidArgumentError naming the known configurations (and the nearest one, for a typo)
 */
export function allocatorConfig(name: string): AllocatorConfig {
  const found = ALLOCATOR_CONFIGS.find((c) => c.name === name);
  if (found) return found;
  const names = ALLOCATOR_CONFIGS.map((c) => c.name);
  const near = nearestName(name, names);
  throw new InvalidArgumentError('--allocator', name, `${near === undefined ? '' : `'${near}' (the nearest name) or `}one of ${names.join(', ')}`);
}

/**
 * A caching engine of configuration `config` over a virtual device (addresses only, no bytes), so that traces of
 * any size replay on any machine.
 * @throws InvalidArgumentError for a capacity or limit that is not a byte size
 */
export function createReplayAllocator(config: AllocatorConfig, device: DeviceOptions = {}): CachingAllocator {
  const capacityBytes = device.capacity === undefined ? undefined : byteSize('--capacity', device.capacity);
  const memoryLimit = device.limit === undefined ? undefined : byteSize('--limit', device.limit);
  const streams = Math.max(1, device.streams ?? 1);
  const backend = new VirtualMemoryBackend({ streams, ...(capacityBytes === undefined ? {} : { capacityBytes }) });
  return new CachingAllocator(backend, { ...config.options, ...(memoryLimit === undefined ? {} : { memoryLimit }) });
}

function byteSize(flag: string, value: string): number {
  const bytes = parseBytes(value);
  if (bytes === undefined || !Number.isSafeInteger(bytes) || bytes <= 0) throw new InvalidArgumentError(flag, value, "a positive byte size such as '80GiB', '512MiB' or 1073741824");
  return bytes;
}
