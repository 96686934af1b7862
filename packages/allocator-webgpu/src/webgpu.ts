import type { DependencyContainer } from 'tsyringe';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec, Plugin, CachingAllocatorOptions } from '@stowage/core';
import { checkEnum, createDeviceAllocator, registerDeviceAllocator, resolveDeviceOptions } from '@stowage/core';
import type { OpenWebGpuOptions, WebGpuContext } from './openWebGpuDevice.js';
import { checkOpenWebGpuOptions, OPEN_WEBGPU_OPTION_KEYS, openWebGpuDevice } from './openWebGpuDevice.js';
import { WebGpuAllocator } from './WebGpuAllocator.js';
import { WebGpuMemoryBackend } from './WebGpuMemoryBackend.js';

export interface WebGpuOptions extends OpenWebGpuOptions, Omit<DeviceAllocatorOptions, 'expandableSegments'> {
  /**
   * The allocator's budget (the engine's `memoryLimit`), in bytes or as text: reserved bytes never exceed it, and
   * past it the out-of-memory chain runs before OutOfMemoryError. WebGPU reports no free memory, so there is
   * always one: default 2 GiB. Segments are sized under it (Note [WebGPU segment sizing]).
   */
  readonly limit?: number | string;
  /**
   * How a segment the device refuses reaches the out-of-memory chain (Note [The device says no] in
   * WebGpuMemoryBackend.ts): `'scope'` (default) learns of it from the error scope, after the allocation that made
   * it returned, and answers later allocations past that point with the chain; `'mapped'` creates every segment
   * mapped, so that a refusal is a RangeError at once and the chain runs before anything is placed in it, at
   * about twice the cost of creating a segment (measured on SwiftShader).
   */
  readonly segmentRefusal?: 'scope' | 'mapped';
}

/** The options that are the device's (opening it, noticing refusals), not the engine's. */
type WebGpuDeviceOption = keyof OpenWebGpuOptions | 'segmentRefusal';

const SEGMENT_REFUSALS = ['scope', 'mapped'] as const;

const DEFAULT_LIMIT = 2 ** 31;
const MiB = 2 ** 20;

/** The smallest segment the WebGPU allocator reserves by default (Note [WebGPU segment sizing]). */
export const DEFAULT_MIN_SEGMENT_BYTES = 48 * MiB;

/**
 * Note [WebGPU segment sizing]: creating a GPUBuffer costs time per byte on software drivers and a segment cannot
 * be partly returned (no page mapping), so WebGPU segments are larger than PyTorch's and shared by small and large
 * tensors (`unifiedPools`): at least a minimum (48 MiB), growing to 1/16 of what is already reserved, at most
 * maxBufferSize. A request larger than half the minimum gets a segment of its own size (rounded up to 2 MiB), as
 * PyTorch gives requests over half its 20 MiB segments their own: placed in a shared segment, it would leave a
 * remainder too small for another tensor of its size. Under a budget (`limit`) below eight minimums the minimum
 * is an eighth of the budget instead, so that a small budget is not spent on one segment its first tensor splits.
 *
 * Fewer, larger segments mean fewer createBuffer calls but more memory left over when a program's peak ends
 * partway into its last segment; without knowing the peak in advance, no schedule keeps both small on every
 * program. Memory comes first: it is what a budget runs out of, and on software drivers what the cold pass pays
 * for. The minimum is the size that keeps peak reserved memory within the WebGPU issue's target on the most
 * replayed traces and, among those sizes, makes the fewest buffers: `pnpm bench:webgpu-segments` measures it, and
 * the package README records the figures.
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

/** The option keys and default budget of the WebGPU plugin, for checking options before a device is open. */
const WEBGPU_OPTIONS = {
  deviceType: 'webgpu',
  deviceOptions: [...OPEN_WEBGPU_OPTION_KEYS, 'segmentRefusal'] as readonly WebGpuDeviceOption[],
  defaultLimit: DEFAULT_LIMIT,
  checkDeviceOptions: (own: Pick<WebGpuOptions, WebGpuDeviceOption>) => {
    checkOpenWebGpuOptions(own);
    checkEnum('options.segmentRefusal', own.segmentRefusal, SEGMENT_REFUSALS);
  },
  // WebGPU buffers cannot map pages (WebGpuOptions omits it).
  engineOptionsLeftOut: ['expandableSegments'],
  reportsCapacity: false,
} as const;

/**
 * WebGPU as a device plugin serves it: one device, `webgpu:0`, the open `context`. The allocator is the engine
 * over a WebGpuMemoryBackend, under the WebGPU engine defaults (which the caller's engine options override) and
 * the budget; the backend reports failures asynchronously, by which time the allocator exists.
 */
function webGpuDevice(context: WebGpuContext): DeviceAllocatorSpec<WebGpuOptions, WebGpuDeviceOption, WebGpuAllocator> {
  return {
    ...WEBGPU_OPTIONS,
    deviceCount: 1,
    create(device, engine, own, budgetBytes) {
      const owner: { allocator?: WebGpuAllocator } = {};
      const backend = new WebGpuMemoryBackend({
        device: context.device,
        index: device.index,
        keepAlive: context.keepAlive,
        mappedSegments: own.segmentRefusal === 'mapped',
        onSegmentFailed: (buffer, error) => owner.allocator?.segmentFailed(buffer, error),
        onLost: (error) => owner.allocator?.deviceLost(error),
      });
      const defaults = webGpuEngineDefaults({ maxBufferSize: context.device.limits.maxBufferSize, ...(budgetBytes === undefined ? {} : { budgetBytes }) });
      try {
        owner.allocator = new WebGpuAllocator(backend, { ...defaults, ...engine });
      } catch (error) {
        backend.dispose();
        throw error;
      }
      return owner.allocator;
    },
  };
}

/**
 * Makes the allocator for an open device, outside a runtime (no reclaimers); same options and budget as `webgpu()`.
 * @throws InvalidArgumentError for a bad option
 */
export function createWebGpuAllocator(context: WebGpuContext, options: WebGpuOptions = {}): WebGpuAllocator {
  return createDeviceAllocator(webGpuDevice(context), options);
}

/**
 * Opens a WebGPU device (see `openWebGpuDevice`) and registers its allocator for `webgpu:0`, through core's
 * `registerDeviceAllocator` (the runtime's reclaimers, the budget, the device-index check).
 * @throws InvalidArgumentError for a bad option (before opening a device); BackendUnavailableError when no device
 * can be opened
 */
export async function registerWebGpuAllocator(container: DependencyContainer, options: WebGpuOptions = {}): Promise<void> {
  const { own } = resolveDeviceOptions(WEBGPU_OPTIONS, options);
  const { segmentRefusal: _refusal, ...open } = own;
  const context = await openWebGpuDevice(open);
  registerDeviceAllocator(container, webGpuDevice(context), options);
}

/**
 * The WebGPU allocator plugin: `createRuntime({ plugins: [webgpu({ limit: '1GiB' })] })`.
 * @throws InvalidArgumentError for a bad option, at once
 */
export function webgpu(options: WebGpuOptions = {}): Plugin {
  resolveDeviceOptions(WEBGPU_OPTIONS, options);
  return { name: 'webgpu', register: (container) => registerWebGpuAllocator(container, options) };
}
