import type { DependencyContainer } from 'tsyringe';
import type { Allocator, CachingAllocatorOptions, Device, Plugin } from '@stowage/core';
import { AllocatorFactory, BackendUnavailableError, formatDevice, InvalidArgumentError, parseBytes } from '@stowage/core';
import type { OpenWebGpuOptions, WebGpuContext } from './openWebGpuDevice.js';
import { openWebGpuDevice } from './openWebGpuDevice.js';
import { WebGpuAllocator } from './WebGpuAllocator.js';
import { WebGpuMemoryBackend } from './WebGpuMemoryBackend.js';

export interface WebGpuOptions extends OpenWebGpuOptions, Omit<CachingAllocatorOptions, 'memoryLimit' | 'expandableSegments'> {
  /**
   * The allocator's budget, in bytes or as text. WebGPU cannot report free memory, so the engine reserves at
   * most this much and runs its out-of-memory chain past it. Default 2 GiB.
   */
  readonly limit?: number | string;
}

const DEFAULT_LIMIT = 2 ** 31;
const MiB = 2 ** 20;

/** The smallest segment the WebGPU allocator reserves by default (Note [WebGPU segment sizing]). */
export const DEFAULT_MIN_SEGMENT_BYTES = 48 * MiB;

/**
 * Note [WebGPU segment sizing]: creating a GPUBuffer costs about 0.65 ms per MiB on software drivers and a
 * segment cannot be partly returned (no page mapping), so WebGPU segments are larger than PyTorch's and shared
 * by small and large tensors (`unifiedPools`): at least 48 MiB, growing to 1/16 of what is already reserved, at
 * most maxBufferSize. A request larger than half the minimum gets a segment of its own size (rounded up to
 * 2 MiB), as PyTorch gives requests over half its 20 MiB segments their own: placed in a shared segment, it would
 * leave a remainder too small for another tensor of its size. Under a budget (`limit`) below 384 MiB the minimum is
 * an eighth of the budget instead, so that a small budget is not spent on one segment its first tensor splits.
 *
 * Fewer, larger segments mean fewer createBuffer calls but more memory left over when a program's peak ends
 * partway into its last segment; without knowing the peak in advance, no schedule keeps both small on every
 * program. The minimum was chosen with `pnpm bench:webgpu-segments`, which replays every PyTorch trace scaled to
 * five peaks (300–512 MiB; a smaller trace once, unscaled) twice, as the WebGPU bench's cold and warm passes,
 * without a device, against the targets of the WebGPU issue (peak reserved at most 1.15× peak allocated;
 * createBuffer calls at most 2 % of TensorFlow.js's buffer manager's). Memory comes first: it is what a budget
 * runs out of, and on software drivers what the cold pass pays for (createBuffer costs per byte). The reserved
 * target holds on 120 of 126 cells at 32, 40 and 48 MiB, 118 at 56, 116 at 64 and 99 at 80; among the first
 * three, 48 MiB makes the fewest buffers (both targets on 84 cells, against 71 at 32 MiB and 79 at 40). 64 MiB
 * would meet both on 93, but the reserved target on 4 fewer cells, 2 of them among the bench's 6 default traces.
 * The previous default, 32 MiB without the own-size rule, met the reserved target on 116 and both on 71.
 */
export function webGpuSegmentSize(maxBufferSize: number, minimumBytes = DEFAULT_MIN_SEGMENT_BYTES): (roundedBytes: number, reservedBytes: number) => number {
  return (roundedBytes, reservedBytes) => {
    if (roundedBytes > minimumBytes / 2) return Math.min(maxBufferSize, Math.ceil(roundedBytes / (2 * MiB)) * 2 * MiB);
    const grown = Math.ceil(reservedBytes / 16 / (2 * MiB)) * 2 * MiB;
    return Math.min(maxBufferSize, Math.max(minimumBytes, grown));
  };
}

export interface WebGpuEngineDefaultsOptions {
  /** The device's maxBufferSize: no segment is larger. */
  readonly maxBufferSize: number;
  /**
   * The allocator's budget (`limit`). Segments start at no more than an eighth of it (in 2 MiB steps), so that a
   * small budget is not spent on one segment that its first tensor splits.
   */
  readonly budgetBytes?: number;
  /** The smallest segment under a large enough budget. Default {@link DEFAULT_MIN_SEGMENT_BYTES}. */
  readonly minimumSegmentBytes?: number;
}

/** The caching engine's options under the WebGPU allocator's defaults (Note [WebGPU segment sizing]). */
export function webGpuEngineDefaults(options: WebGpuEngineDefaultsOptions): CachingAllocatorOptions {
  const { maxBufferSize, budgetBytes = Number.POSITIVE_INFINITY, minimumSegmentBytes = DEFAULT_MIN_SEGMENT_BYTES } = options;
  const budgetShare = Math.max(2 * MiB, Math.floor(budgetBytes / 8 / (2 * MiB)) * 2 * MiB);
  return { unifiedPools: true, segmentSize: webGpuSegmentSize(maxBufferSize, Math.min(minimumSegmentBytes, budgetShare)) };
}

/** Makes the allocator for an open device. */
export function createWebGpuAllocator(context: WebGpuContext, options: WebGpuOptions = {}, index = 0): WebGpuAllocator {
  const capacityBytes = parseBytes(options.limit ?? DEFAULT_LIMIT);
  if (capacityBytes === undefined) throw new InvalidArgumentError('limit', options.limit, "a byte count such as '2GiB'");
  const { device: _device, adapterOptions: _adapter, backends: _backends, limit: _limit, ...engine } = options;
  // The backend reports failures asynchronously, by which time the allocator exists.
  const owner: { allocator?: WebGpuAllocator } = {};
  const backend = new WebGpuMemoryBackend({
    device: context.device,
    index,
    capacityBytes,
    keepAlive: context.keepAlive,
    onSegmentFailed: (buffer, error) => owner.allocator?.segmentFailed(buffer, error),
    onLost: (error) => owner.allocator?.deviceLost(error),
  });
  owner.allocator = new WebGpuAllocator(backend, { ...webGpuEngineDefaults({ maxBufferSize: context.device.limits.maxBufferSize, budgetBytes: capacityBytes }), ...engine });
  return owner.allocator;
}

/**
 * Opens a WebGPU device (see `openWebGpuDevice`) and registers its allocator for `webgpu:0`.
 * @throws BackendUnavailableError when no device can be opened
 */
export async function registerWebGpuAllocator(container: DependencyContainer, options: WebGpuOptions = {}): Promise<void> {
  const context = await openWebGpuDevice(options);
  const factory: AllocatorFactory = {
    deviceType: 'webgpu',
    create(device: Device): Allocator {
      if (device.index !== 0) throw new BackendUnavailableError(`This runtime has one WebGPU device, webgpu:0; ${formatDevice(device)} does not exist.`);
      return createWebGpuAllocator(context, options);
    },
  };
  container.register(AllocatorFactory, { useValue: factory });
}

/** The WebGPU allocator plugin: `createRuntime({ plugins: [webgpu({ limit: '1GiB' })] })`. */
export function webgpu(options: WebGpuOptions = {}): Plugin {
  return { name: 'webgpu', register: (container) => registerWebGpuAllocator(container, options) };
}
