import type { AllocatorStats, CounterName, StatKey, StatName } from '../AllocatorStats.js';

/** One statistic with PyTorch's four fields. Invariant: current == allocated - freed; peak >= current. */
export class Stat {
  current = 0;
  peak = 0;
  allocated = 0;
  freed = 0;

  increase(amount: number): void {
    this.current += amount;
    this.allocated += amount;
    if (this.current > this.peak) this.peak = this.current;
  }

  decrease(amount: number): void {
    this.current -= amount;
    this.freed += amount;
  }

  resetPeak(): void {
    this.peak = this.current;
  }
}

const STAT_NAMES: readonly StatName[] = [
  'allocation',
  'segment',
  'active',
  'inactive_split',
  'allocated_bytes',
  'reserved_bytes',
  'active_bytes',
  'inactive_split_bytes',
  'requested_bytes',
];
const COUNTER_NAMES: readonly CounterName[] = [
  'num_alloc_retries',
  'num_ooms',
  'num_device_alloc',
  'num_device_free',
  'num_sync_all_streams',
  'max_split_size',
];

/** Which pool a block of `bytes` belongs to: PyTorch's small pool holds blocks up to 1 MiB. */
export type PoolName = 'small_pool' | 'large_pool';
export const SMALL_POOL_MAX_BYTES = 1 << 20;
export function poolOf(bytes: number): PoolName {
  return bytes <= SMALL_POOL_MAX_BYTES ? 'small_pool' : 'large_pool';
}

/**
 * The statistics of one allocator, kept per pool with `all` as their sum, flattened to PyTorch's keys on demand.
 * Invariant: for every stat, all == small_pool + large_pool.
 */
export class StatsBook {
  readonly #stats = new Map<string, Stat>();
  readonly counters: Record<CounterName, number> = Object.fromEntries(COUNTER_NAMES.map((n) => [n, 0])) as Record<
    CounterName,
    number
  >;
  readonly oversizeAllocations = new Stat();
  readonly oversizeSegments = new Stat();

  constructor() {
    for (const name of STAT_NAMES) for (const pool of ['all', 'small_pool', 'large_pool']) this.#stats.set(`${name}.${pool}`, new Stat());
  }

  stat(name: StatName, pool: PoolName | 'all'): Stat {
    return this.#stats.get(`${name}.${pool}`)!;
  }

  /** Adds `amount` (negative to subtract) to a stat in `pool` and in `all`. */
  update(name: StatName, pool: PoolName, amount: number): void {
    if (amount >= 0) {
      this.stat(name, pool).increase(amount);
      this.stat(name, 'all').increase(amount);
    } else {
      this.stat(name, pool).decrease(-amount);
      this.stat(name, 'all').decrease(-amount);
    }
  }

  resetPeak(): void {
    for (const stat of this.#stats.values()) stat.resetPeak();
    this.oversizeAllocations.resetPeak();
    this.oversizeSegments.resetPeak();
  }

  toRecord(): AllocatorStats {
    const out: Record<string, number> = {};
    const put = (prefix: string, s: Stat): void => {
      out[`${prefix}.current`] = s.current;
      out[`${prefix}.peak`] = s.peak;
      out[`${prefix}.allocated`] = s.allocated;
      out[`${prefix}.freed`] = s.freed;
    };
    for (const [prefix, stat] of this.#stats) put(prefix, stat);
    put('oversize_allocations', this.oversizeAllocations);
    put('oversize_segments', this.oversizeSegments);
    for (const name of COUNTER_NAMES) out[name] = this.counters[name];
    return out as Record<StatKey, number>;
  }
}
