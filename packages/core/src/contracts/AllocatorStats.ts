/** The four figures PyTorch keeps per statistic. */
export type StatField = 'current' | 'peak' | 'allocated' | 'freed';

/** The pools PyTorch breaks statistics down by. */
export type StatPool = 'all' | 'small_pool' | 'large_pool';

/** Statistics that have the four fields and the pool breakdown. */
export type StatName =
  | 'allocation'
  | 'segment'
  | 'active'
  | 'inactive_split'
  | 'allocated_bytes'
  | 'reserved_bytes'
  | 'active_bytes'
  | 'inactive_split_bytes'
  | 'requested_bytes';

/** Plain counters. */
export type CounterName =
  | 'num_alloc_retries'
  | 'num_ooms'
  | 'num_device_alloc'
  | 'num_device_free'
  | 'num_sync_all_streams'
  | 'max_split_size';

export type StatKey = `${StatName}.${StatPool}.${StatField}` | `oversize_${'allocations' | 'segments'}.${StatField}` | CounterName;

/**
 * Memory statistics under PyTorch's key names (`torch.cuda.memory_stats()`), e.g.
 * `stats['allocated_bytes.all.current']`. Byte figures are bytes; counts are counts.
 */
export type AllocatorStats = Readonly<Record<StatKey, number>>;
