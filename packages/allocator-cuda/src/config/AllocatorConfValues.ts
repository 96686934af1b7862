import type { AllocatorConfKey } from './AllocatorConfKey.js';

/** Every key's value, as PyTorch would hold it after parsing. */
export interface AllocatorConfValues {
  /** `max_split_size_mb` in bytes; blocks at least this large are not split. Default Infinity (unlimited). */
  readonly maxSplitSizeBytes: number;
  /** `max_non_split_rounding_mb` in bytes: how much larger than a request an unsplit cached block may be. Default 20 MiB. */
  readonly maxNonSplitRoundingBytes: number;
  /** `garbage_collection_threshold`, in (0, 1); 0 (the default) is off. */
  readonly garbageCollectionThreshold: number;
  /**
   * `roundup_power2_divisions` expanded to one value per size interval, 16 in all: index 0 is [0, 2 MiB), index i
   * is [2^i, 2^(i+1)) MiB, index 15 is everything from 32 GiB. 0 (the default) or 1: no rounding.
   */
  readonly roundupPower2Divisions: readonly number[];
  /** `expandable_segments`. Default false. */
  readonly expandableSegments: boolean;
  /** `pinned_use_background_threads`. Default false. */
  readonly pinnedUseBackgroundThreads: boolean;
  /** `backend`. Default `'native'`. */
  readonly backend: 'native' | 'cudaMallocAsync';
  /** `release_lock_on_cudamalloc` (or `release_lock_on_hipmalloc`). Default false. */
  readonly releaseLockOnCudaMalloc: boolean;
  /** `pinned_use_cuda_host_register` (or `pinned_use_hip_host_register`). Default false. */
  readonly pinnedUseCudaHostRegister: boolean;
  /** `pinned_num_register_threads`: a power of two up to 128. Default 1. */
  readonly pinnedNumRegisterThreads: number;
  /** `pinned_reserve_segment_size_mb`, in MiB (not bytes, as PyTorch holds it); 0 (the default) reserves none. */
  readonly pinnedReserveSegmentSizeMb: number;
  /** `graph_capture_record_stream_reuse`. Default false. */
  readonly graphCaptureRecordStreamReuse: boolean;
  /** `per_process_memory_fraction`, in [0, 1]. Default 1. */
  readonly perProcessMemoryFraction: number;
}

/** A parsed configuration string. Frozen, arrays included. */
export interface AllocatorConf extends AllocatorConfValues {
  /** The keys the string gave, each once, in the order of first appearance, aliases under their CUDA name. */
  readonly givenKeys: readonly AllocatorConfKey[];
  /** The given keys the caching engine does not act on, each with the reason (for the plugin to warn). */
  readonly notApplied: readonly NotAppliedKey[];
  /** The string as given (for snapshots and messages). */
  readonly text: string;
}

/** A given key whose value the caching engine does not act on. */
export interface NotAppliedKey {
  readonly key: AllocatorConfKey;
  /** One sentence: why it is not applied. */
  readonly reason: string;
}
