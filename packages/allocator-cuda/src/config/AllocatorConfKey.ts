/**
 * The keys of a `PYTORCH_CUDA_ALLOC_CONF` string, under their CUDA names (PyTorch also accepts
 * `release_lock_on_hipmalloc` and `pinned_use_hip_host_register`): the keys every accelerator shares
 * (c10/core/AllocatorConfig) followed by the CUDA ones (c10/cuda/CUDAAllocatorConfig), at the commits named in
 * Note [PyTorch's messages] in AllocatorConf.ts.
 */
export const ALLOCATOR_CONF_KEYS = Object.freeze([
  'max_split_size_mb',
  'max_non_split_rounding_mb',
  'garbage_collection_threshold',
  'roundup_power2_divisions',
  'expandable_segments',
  'pinned_use_background_threads',
  'backend',
  'release_lock_on_cudamalloc',
  'pinned_use_cuda_host_register',
  'pinned_num_register_threads',
  'pinned_reserve_segment_size_mb',
  'graph_capture_record_stream_reuse',
  'per_process_memory_fraction',
] as const);

/** One key of {@link ALLOCATOR_CONF_KEYS}. */
export type AllocatorConfKey = (typeof ALLOCATOR_CONF_KEYS)[number];
