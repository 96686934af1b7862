/** The four figures PyTorch keeps per statistic. */
export type StatField = 'current' | 'peak' | 'allocated' | 'freed';

/**
 * The pools PyTorch breaks statistics down by. A block counts under the pool whose segment holds it, not under the
 * size of its request: with the caching engine's `unifiedPools` (on in the `best` preset, the default, so for
 * `cpu()`; and by default for `webgpu()` in either preset) every request is served from large segments, so small
 * requests (≤ 1 MiB) count under `large_pool` and `small_pool` figures stay 0, where PyTorch would count them under
 * `small_pool`. `all` is the same either way; `unifiedPools: false` (implied by the `pytorch` preset on the CPU)
 * gives PyTorch's split.
 */
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
 * `stats['allocated_bytes.all.current']`. Byte figures are bytes; counts are counts. The `small_pool` and
 * `large_pool` figures follow the pool that holds a block (see {@link StatPool}): under unified pools small
 * allocations show under `large_pool`.
 */
export type AllocatorStats = Readonly<Record<StatKey, number>> & Readonly<PluginStats>;

/**
 * Figures that plugins add to `memoryStats()` beside PyTorch's keys, declared by each plugin with module
 * augmentation, so that a reader finds them typed without a cast:
 * `declare module '@stowage/core/plugin-kit' { interface PluginStats { readonly limbo_bytes?: number } }` (as `@stowage/ipc`
 * does). Optional: present only when the plugin is in the runtime.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- an extension point: plugins merge their keys in
export interface PluginStats {}
