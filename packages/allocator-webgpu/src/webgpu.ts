import type { DependencyContainer } from 'tsyringe';
import type { Plugin, CachingAllocatorOptions } from '@stowage/core';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec, SegmentSizeRule } from '@stowage/core/plugin-kit';
import { BlockInspector, InvalidArgumentError, Pager, parseBytes } from '@stowage/core';
import { checkEnum, createDeviceAllocator, registerDeviceAllocator, resolveDeviceOptions } from '@stowage/core/plugin-kit';
import { WebGpuBuffers } from './WebGpuBuffers.js';
import type { OpenWebGpuOptions, WebGpuContext } from './openWebGpuDevice.js';
import { checkOpenWebGpuOptions, OPEN_WEBGPU_OPTION_KEYS, openWebGpuDevice } from './openWebGpuDevice.js';
import { WebGpuAllocator } from './WebGpuAllocator.js';
import { WebGpuMemoryBackend } from './WebGpuMemoryBackend.js';
import { USAGE_KINDS } from './WebGpuUsage.js';

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
  /**
   * The part of the budget kept for LMS page-out staging while LMS pages this device (Note [One budget] in
   * DeviceBudget.ts): bytes, text such as `'64MiB'`, or `{ fraction }` of the budget. Segments stay within
   * the rest; page-outs in flight hold at most the room segments leave, and one that does not fit is refused (LMS
   * then reclaims a storage whose host copy exists). Without LMS nothing is kept. Default `{ fraction: 0.25 }`.
   */
  readonly pagingReserve?: number | string | { readonly fraction: number };
}

/** The options that are the device's (opening it, noticing refusals), not the engine's. */
type WebGpuDeviceOption = keyof OpenWebGpuOptions | 'segmentRefusal' | 'pagingReserve';

const SEGMENT_REFUSALS = ['scope', 'mapped'] as const;

const DEFAULT_LIMIT = 2 ** 31;
/** The default share of the budget kept for page-out staging under LMS (Note [One budget]). */
const DEFAULT_PAGING_RESERVE = { fraction: 0.25 } as const;

/**
 * The bytes of `budgetBytes` that `pagingReserve` keeps for page-out staging.
 * @throws InvalidArgumentError for a reserve that is not bytes, text or a fraction in [0, 1)
 */
export function pagingReserveBytes(pagingReserve: WebGpuOptions['pagingReserve'], budgetBytes: number): number {
  const reserve = pagingReserve ?? DEFAULT_PAGING_RESERVE;
  if (typeof reserve === 'object' && reserve !== null) {
    if (typeof reserve.fraction !== 'number' || !(reserve.fraction >= 0 && reserve.fraction < 1)) {
      throw new InvalidArgumentError('options.pagingReserve.fraction', reserve.fraction, 'a fraction of the budget in [0, 1)');
    }
    return Math.floor(reserve.fraction * budgetBytes);
  }
  const bytes = typeof reserve === 'number' || typeof reserve === 'string' ? parseBytes(reserve) : undefined;
  if (bytes === undefined) throw new InvalidArgumentError('options.pagingReserve', reserve, "a byte count such as '64MiB', or { fraction } of the budget");
  return bytes;
}
const KiB = 2 ** 10;
const MiB = 2 ** 20;

/** The size segments grow to, and from then on the smallest new segment (Note [WebGPU segment sizing]). */
export const DEFAULT_MIN_SEGMENT_BYTES = 48 * MiB;
/** The first storage segment (Note [WebGPU segment sizing]). */
export const DEFAULT_FIRST_SEGMENT_BYTES = 416 * KiB;
/** The first uniform segment: a dispatch's uniforms take one 512-byte block each and go back at the submit. */
const DEFAULT_FIRST_UNIFORM_SEGMENT_BYTES = 16 * KiB;
/** The share of what a usage class has reserved that its next segment takes, from 4 MiB until the minimum. */
const DEFAULT_SEGMENT_GROWTH = 0.5;
/** Below this many reserved bytes of its class, a new segment is as large as what the class reserved. */
const DEFAULT_DOUBLING_BELOW_BYTES = 4 * MiB;
/** The share of what a usage class has reserved that its next segment takes between one and two minimums. */
const DEFAULT_GROWTH_PAST_MINIMUM = 1 / 8;

/** How WebGPU segments are sized (Note [WebGPU segment sizing]); every field has the default named beside it. */
export interface WebGpuSegmentSizing {
  /** The first segment of the storage class. Default {@link DEFAULT_FIRST_SEGMENT_BYTES}. */
  readonly firstSegmentBytes?: number;
  /** The first segment of the uniform class. Default 16 KiB. */
  readonly firstUniformSegmentBytes?: number;
  /**
   * The size segments grow to: a usage class reserves its first `minimumSegmentBytes` in growing pieces, and no
   * later segment of it is smaller. Default {@link DEFAULT_MIN_SEGMENT_BYTES}.
   */
  readonly minimumSegmentBytes?: number;
  /** The share of its class's reserved bytes a new segment takes while growing, once doubling stopped. Default 0.5. */
  readonly growth?: number;
  /** Below this many reserved bytes of its class, a new segment is as large as what the class reserved. Default 4 MiB. */
  readonly doublingBelowBytes?: number;
  /**
   * Once a class reserved the minimum and until it reserved twice that, the share of its reserved bytes a new
   * segment takes (in 2 MiB steps; at least twice the request, at most the minimum). Default 1/8; 1 is the former
   * rule (the minimum at once).
   */
  readonly growthPastMinimum?: number;
}

/**
 * Note [WebGPU segment sizing]: creating a GPUBuffer costs time per byte on software drivers and a segment cannot
 * be partly returned (no page mapping), so WebGPU segments are shared by small and large tensors
 * (`unifiedPools`) and grow with the program. Per usage class (storage and uniform have their own segments, Note
 * [Segment kinds] in core), with R the bytes that class has reserved:
 * - the first segment is small: 416 KiB for storage, 16 KiB for uniforms (tfjs's uniforms take one 512-byte
 *   block per dispatch and go back at the submit);
 * - below R = 4 MiB a new segment is R (doubling), then half of R, and none crosses the minimum (48 MiB): a class
 *   reserves its first 48 MiB in growing pieces, so that a small program makes a few segments, its last one at
 *   most half (a third, past 4 MiB) of what it reserved, and a large program's segments from 48 MiB on fall where
 *   a fixed 48 MiB minimum puts them;
 * - from R = 48 MiB to 96 MiB a new segment is an eighth of R (in 2 MiB steps: 6 to 12 MiB), or twice the request
 *   when that is more (at most the minimum); from R = 96 MiB on it is the minimum, growing to a sixteenth of R, at
 *   most maxBufferSize;
 * - a request larger than half the segment its class would get now (half the minimum once past it) gets a segment of
 *   its own size, as PyTorch gives requests over half its 20 MiB segments their own: placed in a shared segment,
 *   it would leave a remainder too small for another tensor of its size;
 * - sizes are rounded up to an eighth of their power of two, within 4 KiB and 2 MiB: whole 2 MiB steps from 16
 *   MiB up, and never more than an eighth added to a smaller one.
 * Under a budget (`limit`) below eight minimums the minimum is an eighth of the budget instead, so that a small
 * budget is not spent on one segment its first tensor splits.
 *
 * Fewer, larger segments mean fewer createBuffer calls but more memory left over when a program's peak ends
 * partway into its last segment; without knowing the peak in advance, no schedule keeps both small on every
 * program. Between one and two minimums the segments grow by an eighth: a program whose tensors peak there (tfjs's
 * real models: 50–100 MB) then ends about an eighth past what its blocks span, where a whole 48 MiB segment would
 * have decided its peak (it doubled the reserved bytes of a face model that needed just over 48 MiB, and put it
 * above stock tfjs's own pool). A segment is at least twice its request there, and only a request over half the
 * minimum gets one of its own, because segments cut to single mid-size tensors fragment a large program; and the
 * eighths stop at two minimums, because small segments made all the way to 384 MiB raised reserved over allocated
 * past 1.15× on a tenth of the PyTorch traces at 300–512 MiB (`pnpm bench:webgpu-segments`, the package README). Memory comes first: it is what a budget runs out of, and on software drivers what the cold pass pays
 * for (per byte: the pieces cost a large program up to a dozen more createBuffer calls, not more bytes). The
 * minimum is the size that keeps peak reserved memory within the WebGPU issue's target on the most replayed
 * traces, and the pieces keep that count. The first size and the doubling are the least that keep tfjs's small models
 * (tfjs-webgpu's bench) within a twentieth of stock tfjs's storage createBuffer calls: starting smaller or
 * growing slower reserves less on them but makes more buffers. `pnpm bench:webgpu-segments` measures the rule
 * against fixed minima and other first sizes and growths, and the package README records the figures.
 */
export function webGpuSegmentSize(maxBufferSize: number, sizing: WebGpuSegmentSizing = {}): SegmentSizeRule {
  const minimumBytes = sizing.minimumSegmentBytes ?? DEFAULT_MIN_SEGMENT_BYTES;
  const growth = sizing.growth ?? DEFAULT_SEGMENT_GROWTH;
  const doublingBelowBytes = sizing.doublingBelowBytes ?? DEFAULT_DOUBLING_BELOW_BYTES;
  const growthPastMinimum = sizing.growthPastMinimum ?? DEFAULT_GROWTH_PAST_MINIMUM;
  const firstBytes = Math.min(minimumBytes, sizing.firstSegmentBytes ?? DEFAULT_FIRST_SEGMENT_BYTES);
  const firstUniformBytes = Math.min(minimumBytes, sizing.firstUniformSegmentBytes ?? DEFAULT_FIRST_UNIFORM_SEGMENT_BYTES);
  return (roundedBytes, _reservedBytes, { kind, kindReservedBytes }) => {
    const first = kind === USAGE_KINDS.uniform ? firstUniformBytes : firstBytes;
    // Until the class has reserved one minimum, its segments are pieces of it: none crosses it; then they grow by
    // an eighth until two minimums. A first size of the minimum is the fixed rule: no pieces.
    const pieces = first < minimumBytes;
    const grown = Math.ceil(kindReservedBytes / 16 / (2 * MiB)) * 2 * MiB;
    if (kindReservedBytes >= minimumBytes || !pieces) {
      // Past the minimum, a request up to half the minimum shares a segment at least twice its size, so that the
      // rest of it can hold another such tensor.
      const past =
        pieces && kindReservedBytes < 2 * minimumBytes
          ? Math.min(minimumBytes, Math.max(Math.ceil((kindReservedBytes * growthPastMinimum) / (2 * MiB)) * 2 * MiB, roundUpToStep(2 * roundedBytes)))
          : minimumBytes;
      return Math.min(maxBufferSize, roundedBytes > minimumBytes / 2 ? roundUpToStep(roundedBytes) : Math.max(past, grown));
    }
    const shared = Math.min(minimumBytes - kindReservedBytes, Math.max(first, roundUpToStep(kindReservedBytes * (kindReservedBytes < doublingBelowBytes ? 1 : growth))));
    const ownAbove = shared / 2;
    return Math.min(maxBufferSize, roundedBytes > ownAbove ? roundUpToStep(roundedBytes) : shared);
  };
}

/** `bytes` rounded up to a multiple of an eighth of its power of two, within 4 KiB to 2 MiB (Note [WebGPU segment sizing]). */
function roundUpToStep(bytes: number): number {
  const step = Math.min(2 * MiB, Math.max(4 * KiB, 2 ** Math.floor(Math.log2(Math.max(bytes, 1))) / 8));
  return Math.ceil(bytes / step) * step;
}

export interface WebGpuEngineDefaultsOptions extends WebGpuSegmentSizing {
  /** The device's maxBufferSize: no segment is larger. */
  readonly maxBufferSize: number;
  /**
   * The allocator's budget (`limit`). Segments grow to no more than an eighth of it (in 2 MiB steps), so that a
   * small budget is not spent on one segment that its first tensor splits.
   */
  readonly budgetBytes?: number;
}

/** The caching engine's options under the WebGPU allocator's defaults (Note [WebGPU segment sizing]). */
export function webGpuEngineDefaults(options: WebGpuEngineDefaultsOptions): CachingAllocatorOptions {
  const { maxBufferSize, budgetBytes = Number.POSITIVE_INFINITY, minimumSegmentBytes = DEFAULT_MIN_SEGMENT_BYTES, ...sizing } = options;
  const budgetShare = Math.max(2 * MiB, Math.floor(budgetBytes / 8 / (2 * MiB)) * 2 * MiB);
  return { unifiedPools: true, segmentSize: webGpuSegmentSize(maxBufferSize, { ...sizing, minimumSegmentBytes: Math.min(minimumSegmentBytes, budgetShare) }) };
}

/** The option keys and default budget of the WebGPU plugin, for checking options before a device is open. */
const WEBGPU_OPTIONS = {
  deviceType: 'webgpu',
  deviceOptions: [...OPEN_WEBGPU_OPTION_KEYS, 'segmentRefusal', 'pagingReserve'] as readonly WebGpuDeviceOption[],
  defaultLimit: DEFAULT_LIMIT,
  checkDeviceOptions: (own: Pick<WebGpuOptions, WebGpuDeviceOption>) => {
    checkOpenWebGpuOptions(own);
    checkEnum('options.segmentRefusal', own.segmentRefusal, SEGMENT_REFUSALS);
    pagingReserveBytes(own.pagingReserve, DEFAULT_LIMIT);
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
    provideServices(allocator, provide) {
      provide(BlockInspector, allocator.engine);
      provide(Pager, allocator.pager);
      provide(WebGpuBuffers, allocator);
    },
    create(device, engine, own, budgetBytes) {
      const owner: { allocator?: WebGpuAllocator } = {};
      const backend = new WebGpuMemoryBackend({
        device: context.device,
        index: device.index,
        keepAlive: context.keepAlive,
        mappedSegments: own.segmentRefusal === 'mapped',
        ...(budgetBytes === undefined ? {} : { budgetBytes, pagingReserveBytes: pagingReserveBytes(own.pagingReserve, budgetBytes) }),
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
  const { segmentRefusal: _refusal, pagingReserve: _reserve, ...open } = own;
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
