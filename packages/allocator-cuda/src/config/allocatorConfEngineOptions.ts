import type { CachingAllocatorOptions } from '@stowage/core';

import type { AllocatorConf, AllocatorConfValues, NotAppliedKey } from './AllocatorConfValues.js';
import type { AllocatorConfKey } from './AllocatorConfKey.js';

const MiB = 2 ** 20;
/** The caching engine's rounding for an unsplit large block: PyTorch's default max_non_split_rounding_mb. */
const ENGINE_NON_SPLIT_ROUNDING_BYTES = 20 * MiB;
/** The engine takes a max split size above its 20 MiB large segment only. */
const ENGINE_MIN_MAX_SPLIT_BYTES = 20 * MiB + 1;

const PINNED = 'pinned host memory is not allocated by the caching engine';

/**
 * Note [Keys not applied]
 * The string is parsed and checked in full, so a typo or a bad value fails as in PyTorch, but only some keys act on
 * the caching engine (allocatorConfEngineOptions). A given key whose value asks for something the engine does not
 * do is listed with a reason, for the plugin to warn about; a key given its default (`release_lock_on_cudamalloc:False`,
 * `backend:native`) asks for nothing and is not listed.
 */
export function notAppliedKeys(conf: AllocatorConfValues, givenKeys: readonly AllocatorConfKey[]): NotAppliedKey[] {
  const list: NotAppliedKey[] = [];
  const given = (key: AllocatorConfKey): boolean => givenKeys.includes(key);
  const add = (key: AllocatorConfKey, applies: boolean, reason: string): void => {
    if (given(key) && !applies) list.push({ key, reason });
  };
  for (const key of givenKeys) {
    switch (key) {
      case 'max_split_size_mb':
        add(key, conf.maxSplitSizeBytes >= ENGINE_MIN_MAX_SPLIT_BYTES, 'the caching engine takes a max split size above its 20 MiB large segment only');
        break;
      case 'max_non_split_rounding_mb':
        add(key, conf.maxNonSplitRoundingBytes === ENGINE_NON_SPLIT_ROUNDING_BYTES, "the caching engine's rounding for an unsplit block is fixed at PyTorch's default, 20 MiB");
        break;
      case 'garbage_collection_threshold':
        add(key, hasMemoryFraction(conf, givenKeys), 'PyTorch and the caching engine collect only under a memory limit, and per_process_memory_fraction is not given');
        break;
      case 'per_process_memory_fraction':
        add(key, hasMemoryFraction(conf, givenKeys), 'the caching engine takes a memory fraction in (0, 1] only');
        break;
      case 'roundup_power2_divisions':
        add(key, conf.roundupPower2Divisions.every((n) => Number.isSafeInteger(n)), 'the caching engine takes division counts up to 2^53 - 1 only');
        break;
      case 'expandable_segments':
        break;
      case 'backend':
        add(key, conf.backend === 'native', 'Stowage has no cudaMallocAsync backend: its caching engine serves every allocation');
        break;
      case 'release_lock_on_cudamalloc':
        add(key, !conf.releaseLockOnCudaMalloc, 'the caching engine runs on one JavaScript thread and holds no lock around cuMemAlloc');
        break;
      case 'graph_capture_record_stream_reuse':
        add(key, !conf.graphCaptureRecordStreamReuse, 'Stowage does not capture CUDA graphs');
        break;
      case 'pinned_use_background_threads':
        add(key, !conf.pinnedUseBackgroundThreads, PINNED);
        break;
      case 'pinned_use_cuda_host_register':
        add(key, !conf.pinnedUseCudaHostRegister, PINNED);
        break;
      case 'pinned_num_register_threads':
        add(key, conf.pinnedNumRegisterThreads === 1, PINNED);
        break;
      case 'pinned_reserve_segment_size_mb':
        add(key, conf.pinnedReserveSegmentSizeMb === 0, PINNED);
        break;
    }
  }
  return list;
}

function hasMemoryFraction(conf: AllocatorConfValues, givenKeys: readonly AllocatorConfKey[]): boolean {
  return givenKeys.includes('per_process_memory_fraction') && conf.perProcessMemoryFraction > 0;
}

/**
 * The caching-engine options a parsed string asks for, for `new CachingAllocator(backend, options)`:
 * max_split_size_mb → `maxSplitSize` (bytes; unlimited is `Number.MAX_SAFE_INTEGER`, the engine's own unlimited),
 * roundup_power2_divisions → `roundupPower2Divisions` (the 16 per-interval values), garbage_collection_threshold →
 * `garbageCollectionThreshold`, per_process_memory_fraction → `memoryLimit: { fraction }`, expandable_segments →
 * `expandableSegments`. Only given keys are mapped, so a key left out keeps the engine's default for its preset
 * (the `best` preset's expandable segments included); keys in `conf.notApplied` are left out (Note [Keys not applied]).
 */
export function allocatorConfEngineOptions(conf: AllocatorConf): CachingAllocatorOptions {
  const applied = (key: AllocatorConfKey): boolean => conf.givenKeys.includes(key) && !conf.notApplied.some((n) => n.key === key);
  const options: { -readonly [K in keyof CachingAllocatorOptions]: CachingAllocatorOptions[K] } = {};
  if (applied('max_split_size_mb')) options.maxSplitSize = Number.isFinite(conf.maxSplitSizeBytes) ? conf.maxSplitSizeBytes : Number.MAX_SAFE_INTEGER;
  if (applied('roundup_power2_divisions')) options.roundupPower2Divisions = [...conf.roundupPower2Divisions];
  if (applied('per_process_memory_fraction')) options.memoryLimit = { fraction: conf.perProcessMemoryFraction };
  if (applied('garbage_collection_threshold')) options.garbageCollectionThreshold = conf.garbageCollectionThreshold;
  if (applied('expandable_segments')) options.expandableSegments = conf.expandableSegments;
  return options;
}
