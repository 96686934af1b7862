import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { parseBytes } from '../units/formatBytes.js';
import type { MemoryReclaimer } from '../contracts/MemoryReclaimer.js';
import { checkBoolean, checkEnum, checkFunction, checkOptions } from '../validation/validate.js';
import { LARGE_SEGMENT_BYTES, ROUNDUP_INTERVALS } from './SizeClass.js';

/** What a custom segment size may depend on besides the request and every kind's reserved bytes. */
export interface SegmentSizeContext {
  /** The backend's segment kind the new segment is for (Note [Segment kinds] in CachingAllocator.ts). */
  readonly kind: number;
  /** Bytes reserved in segments of that kind right now. */
  readonly kindReservedBytes: number;
}

/** The bytes of a new segment for a request of `roundedBytes` (see `CachingAllocatorOptions#segmentSize`). */
export type SegmentSizeRule = (roundedBytes: number, reservedBytes: number, segment: SegmentSizeContext) => number;

/**
 * How the caching engine behaves. `preset: 'pytorch'` reproduces PyTorch's defaults exactly (the parity
 * configuration); `preset: 'best'` is Stowage's default, chosen by measurement (see `pnpm bench:engine`).
 * Explicit fields override the preset.
 */
export interface CachingAllocatorOptions {
  readonly preset?: 'pytorch' | 'best';
  /**
   * Blocks at least this large are never split (and requests under it are never served from one), as PyTorch's
   * `max_split_size_mb`; more than 20 MiB. Default: unlimited.
   */
  readonly maxSplitSize?: number | string;
  /**
   * Round requests up to one of N equal divisions between powers of two: one N for all sizes, or one per
   * interval ([0, 2 MiB), [2, 4), [4, 8) … MiB, 16 intervals). 0 or 1 disables. Default 0.
   */
  readonly roundupPower2Divisions?: number | readonly number[];
  /**
   * With a memory limit, free the oldest cached segments when reserved memory passes this fraction of the limit,
   * before asking the backend for more (PyTorch's `garbage_collection_threshold`). In (0, 1). Default off.
   */
  readonly garbageCollectionThreshold?: number;
  /** A per-device limit: bytes (`'8GiB'`), or `{ fraction }` of the backend's capacity. Default: none. */
  readonly memoryLimit?: number | string | { readonly fraction: number };
  /** Grow one expandable segment per stream and pool by mapping pages, where the backend can. */
  readonly expandableSegments?: boolean;
  /**
   * With expandable segments: before growing a segment for a new peak of live bytes, unmap the free pages of
   * every expandable segment (all streams, pools and kinds share the device's memory) when reserved bytes would
   * exceed allocated bytes by more than this fraction (Note [Expandable segments] in ExpandableSegments.ts).
   * Default: 0.005 in the best preset, off (Infinity) in the pytorch preset.
   */
  readonly fragmentationLimit?: number;
  /**
   * With expandable segments: bytes per page, each one physical allocation of the backend, mapped and unmapped whole
   * (Note [Expandable segments] in ExpandableSegments.ts). One size for every segment, or one for segments of the
   * small pool and one for the large pool; bytes or text (`'20MiB'`), rounded up to a multiple of the backend's
   * mapping granularity. Larger pages make fewer backend calls and give memory back in larger pieces. Default: the
   * granularity in the best preset; PyTorch's 2 MiB (small pool) and 20 MiB (large pool) in the pytorch preset.
   */
  readonly segmentPageBytes?: number | string | { readonly small: number | string; readonly large: number | string };
  /**
   * With expandable segments: map the pages of each growth as one backend allocation (a run), instead of one per
   * page; a run is unmapped only whole, once every byte of it is free (Note [Page runs] in ExpandableSegments.ts).
   * Default off (the CUDA plugin turns it on).
   */
  readonly pageRuns?: boolean;
  /**
   * Segment size for a request that no cached block fits: `(roundedBytes, reservedBytes, segment) => bytes` (at
   * least roundedBytes; `reservedBytes` is every kind's, `segment` names the kind the segment is for and what that
   * kind has reserved). Default: PyTorch's sizing (2 MiB, 20 MiB or the request rounded to 2 MiB). Devices whose
   * buffer creation is slow and cannot map pages (WebGPU) use larger segments that grow with reserved memory.
   * For a request under the max split size, the engine keeps the segment under it (the largest multiple of 2 MiB
   * below it), so that the remainder can serve later requests.
   */
  readonly segmentSize?: SegmentSizeRule;
  /**
   * Serve every request from one pool per stream and kind, splitting down to 512 bytes, instead of PyTorch's
   * small and large pools: small tensors then live in the large segments. Default: on in the best preset (one
   * expandable segment per stream: free pages of either kind of tensor serve both), off in the pytorch preset.
   */
  readonly unifiedPools?: boolean;
  /**
   * Keep freed blocks unmerged in short per-size lists for O(1) reuse of the same size, merging them before any
   * reservation (Note [Deferred coalescing] in QuickLists.ts). Default: on in the best preset.
   */
  readonly deferCoalescing?: boolean;
  /**
   * False: a block of a fixed segment is never split, so each allocation takes a whole block and a segment holds one
   * allocation at a time (a cached block serves only a request it fits without a remainder worth splitting off).
   * With `segmentSize: (r) => r` that is one segment per allocation for its whole life: a pinned allocation then
   * never keeps free bytes beside it reserved, which a small budget under LMS needs (Note [Segments under a small
   * budget] in example-train's lmsRun.ts); with larger segments, each allocation takes a whole one. Expandable
   * segments always split. Default true.
   */
  readonly splitBlocks?: boolean;
  /**
   * Called in order when the device is full after the engine released its own cache (IPC collect, then LMS
   * reclaim); the allocation is retried after each one that frees something.
   */
  readonly reclaimers?: () => readonly MemoryReclaimer[];
}

/** Options with every field decided. */
export interface ResolvedCachingOptions {
  readonly preset: 'pytorch' | 'best';
  readonly maxSplitSize: number;
  readonly roundupPower2Divisions: readonly number[];
  readonly garbageCollectionThreshold: number;
  readonly memoryLimit: number | { readonly fraction: number } | undefined;
  readonly expandableSegments: boolean;
  readonly fragmentationLimit: number;
  /** Page bytes of expandable segments per pool; undefined: the preset's (ExpandableSegments resolves it). */
  readonly segmentPageBytes: { readonly small: number; readonly large: number } | undefined;
  readonly pageRuns: boolean;
  readonly deferCoalescing: boolean;
  readonly segmentSize: SegmentSizeRule | undefined;
  readonly unifiedPools: boolean;
  readonly splitBlocks: boolean;
  readonly reclaimers: () => readonly MemoryReclaimer[];
}

/** Every key of {@link CachingAllocatorOptions}: any other key is refused (a misspelled option must not do nothing). */
export const CACHING_OPTION_KEYS: readonly (keyof CachingAllocatorOptions)[] = [
  'preset',
  'maxSplitSize',
  'roundupPower2Divisions',
  'garbageCollectionThreshold',
  'memoryLimit',
  'expandableSegments',
  'fragmentationLimit',
  'segmentPageBytes',
  'pageRuns',
  'segmentSize',
  'unifiedPools',
  'deferCoalescing',
  'splitBlocks',
  'reclaimers',
];

const NO_RECLAIMERS = (): readonly MemoryReclaimer[] => [];

/**
 * Checks every option and decides the ones left out. `undefined` is `{}`.
 * @throws InvalidArgumentError naming the first option that is out of range, of the wrong type (a boolean option
 * given as `'no'` or `1`), or not an option at all (a key outside {@link CACHING_OPTION_KEYS}, with the nearest one)
 */
export function resolveCachingOptions(given: CachingAllocatorOptions | undefined): ResolvedCachingOptions {
  const options = checkOptions('options', given, CACHING_OPTION_KEYS);
  const preset = checkEnum('options.preset', options.preset, ['best', 'pytorch'] as const) ?? 'best';
  const expandableSegments = checkBoolean('options.expandableSegments', options.expandableSegments);
  const deferCoalescing = checkBoolean('options.deferCoalescing', options.deferCoalescing);
  const unifiedPools = checkBoolean('options.unifiedPools', options.unifiedPools);
  const splitBlocks = checkBoolean('options.splitBlocks', options.splitBlocks);
  let maxSplitSize = Number.MAX_SAFE_INTEGER;
  if (options.maxSplitSize !== undefined) {
    const bytes = parseBytes(options.maxSplitSize);
    if (bytes === undefined || bytes <= LARGE_SEGMENT_BYTES) {
      throw new InvalidArgumentError('options.maxSplitSize', options.maxSplitSize, 'a byte count above 20 MiB');
    }
    maxSplitSize = bytes;
  }
  const divisions = options.roundupPower2Divisions ?? 0;
  if (typeof divisions !== 'number' && !Array.isArray(divisions)) {
    throw new InvalidArgumentError('options.roundupPower2Divisions', divisions, `0, 1 or a power of two, or a list of up to ${ROUNDUP_INTERVALS} of them`);
  }
  const list = typeof divisions === 'number' ? new Array<number>(ROUNDUP_INTERVALS).fill(divisions) : [...(divisions as readonly number[])];
  // Exact for any safe integer, where `d & (d - 1)` sees only the low 32 bits.
  const isPowerOfTwo = (d: number): boolean => 2 ** Math.round(Math.log2(d)) === d;
  if (list.length > ROUNDUP_INTERVALS || list.some((d) => !Number.isSafeInteger(d) || d < 0 || (d > 1 && !isPowerOfTwo(d)))) {
    throw new InvalidArgumentError('options.roundupPower2Divisions', divisions, `0, 1 or a power of two, or up to ${ROUNDUP_INTERVALS} of them`);
  }
  const gc = options.garbageCollectionThreshold ?? 0;
  if (typeof gc !== 'number' || !(gc >= 0 && gc < 1)) throw new InvalidArgumentError('options.garbageCollectionThreshold', gc, 'a fraction in (0, 1), or 0 to disable');
  let memoryLimit: ResolvedCachingOptions['memoryLimit'];
  const limit = options.memoryLimit;
  if (typeof limit === 'object' && limit !== null) {
    checkOptions('options.memoryLimit', limit, ['fraction']);
    if (!(limit.fraction > 0 && limit.fraction <= 1)) throw new InvalidArgumentError('options.memoryLimit.fraction', limit.fraction, 'a fraction in (0, 1]');
    memoryLimit = { fraction: limit.fraction };
  } else if (limit !== undefined) {
    memoryLimit = parseBytes(limit);
    if (memoryLimit === undefined) throw new InvalidArgumentError('options.memoryLimit', limit, "a byte count such as '8GiB', or { fraction }");
  }
  if (gc > 0 && memoryLimit === undefined) {
    throw new InvalidArgumentError('options.garbageCollectionThreshold', gc, 'used together with options.memoryLimit (it is a fraction of the limit)');
  }
  return {
    preset,
    maxSplitSize,
    roundupPower2Divisions: list.every((d) => d <= 1) ? [] : list,
    garbageCollectionThreshold: gc,
    memoryLimit,
    expandableSegments: expandableSegments ?? preset === 'best',
    fragmentationLimit: checkFragmentationLimit(options.fragmentationLimit ?? (preset === 'best' ? 0.005 : Number.POSITIVE_INFINITY)),
    segmentPageBytes: checkSegmentPageBytes(options.segmentPageBytes),
    pageRuns: checkBoolean('options.pageRuns', options.pageRuns) ?? false,
    deferCoalescing: deferCoalescing ?? preset === 'best',
    segmentSize: checkOptionalFunction('options.segmentSize', options.segmentSize),
    unifiedPools: unifiedPools ?? preset === 'best',
    splitBlocks: splitBlocks ?? true,
    reclaimers: checkOptionalFunction('options.reclaimers', options.reclaimers) ?? NO_RECLAIMERS,
  };
}

function checkOptionalFunction<F extends (...args: never[]) => unknown>(argument: string, value: F | undefined): F | undefined {
  return value === undefined ? undefined : checkFunction<F>(argument, value);
}

function checkFragmentationLimit(value: unknown): number {
  if (typeof value !== 'number' || !(value >= 0)) throw new InvalidArgumentError('options.fragmentationLimit', value, 'a fraction >= 0, or Infinity to disable');
  return value;
}

function checkSegmentPageBytes(value: CachingAllocatorOptions['segmentPageBytes']): ResolvedCachingOptions['segmentPageBytes'] {
  if (value === undefined) return undefined;
  const expected = "a page size in bytes of at least 1, as a number or text such as '20MiB', or { small, large } of them";
  const bytes = (v: unknown): number => {
    const parsed = typeof v === 'number' || typeof v === 'string' ? parseBytes(v) : undefined;
    if (parsed === undefined || parsed < 1) throw new InvalidArgumentError('options.segmentPageBytes', value, expected);
    return parsed;
  };
  if (typeof value === 'object' && value !== null) {
    checkOptions('options.segmentPageBytes', value, ['small', 'large']);
    return { small: bytes(value.small), large: bytes(value.large) };
  }
  const both = bytes(value);
  return { small: both, large: both };
}
