import type { AllocatorStats, CounterName, StatKey, StatName } from '../AllocatorStats.js';

/** One statistic with PyTorch's four fields. Invariant: current == allocated - freed; peak >= current. */
export class Stat {
  current = 0;
  peak = 0;
  allocated = 0;
  freed = 0;

  /** Adds `amount` (negative to subtract), counting it as allocated or freed. */
  add(amount: number): void {
    this.current += amount;
    if (amount >= 0) {
      this.allocated += amount;
      if (this.current > this.peak) this.peak = this.current;
    } else {
      this.freed -= amount;
    }
  }

  /** `add` for a known non-negative amount (the hot path's increments). */
  inc(amount: number): void {
    this.current += amount;
    this.allocated += amount;
    if (this.current > this.peak) this.peak = this.current;
  }

  /** `add(-amount)` for a known non-negative amount. */
  dec(amount: number): void {
    this.current -= amount;
    this.freed += amount;
  }

  resetPeak(): void {
    this.peak = this.current;
  }
}

/** A statistic broken down by pool. Invariant: all == small + large (for each field). */
export class PooledStat {
  readonly all = new Stat();
  readonly small = new Stat();
  readonly large = new Stat();

  add(small: boolean, amount: number): void {
    this.all.add(amount);
    (small ? this.small : this.large).add(amount);
  }

  inc(small: boolean, amount: number): void {
    this.all.inc(amount);
    (small ? this.small : this.large).inc(amount);
  }

  dec(small: boolean, amount: number): void {
    this.all.dec(amount);
    (small ? this.small : this.large).dec(amount);
  }

  resetPeak(): void {
    this.all.resetPeak();
    this.small.resetPeak();
    this.large.resetPeak();
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

/**
 * The statistics of one allocator under PyTorch's names, as fields for the hot path, flattened to
 * `memoryStats()` keys on demand.
 */
export class StatsBook {
  readonly allocation = new PooledStat();
  readonly segment = new PooledStat();
  readonly active = new PooledStat();
  readonly inactive_split = new PooledStat();
  readonly allocated_bytes = new PooledStat();
  readonly reserved_bytes = new PooledStat();
  readonly active_bytes = new PooledStat();
  readonly inactive_split_bytes = new PooledStat();
  readonly requested_bytes = new PooledStat();
  readonly oversize_allocations = new Stat();
  readonly oversize_segments = new Stat();
  num_alloc_retries = 0;
  num_ooms = 0;
  num_device_alloc = 0;
  num_device_free = 0;
  num_sync_all_streams = 0;
  max_split_size = 0;

  /** A block of `blockBytes` was handed out for a request of `requestedBytes`: it is allocated and active. */
  countAllocated(small: boolean, blockBytes: number, requestedBytes: number): void {
    this.allocation.inc(small, 1);
    this.allocated_bytes.inc(small, blockBytes);
    this.active.inc(small, 1);
    this.active_bytes.inc(small, blockBytes);
    this.requested_bytes.inc(small, requestedBytes);
  }

  /** The caller freed a block: no longer allocated (still active until it is reusable). */
  countFreed(small: boolean, blockBytes: number): void {
    this.allocation.dec(small, 1);
    this.allocated_bytes.dec(small, blockBytes);
  }

  /** A freed block became reusable: no longer active. */
  countInactive(small: boolean, blockBytes: number, requestedBytes: number): void {
    this.active.dec(small, 1);
    this.active_bytes.dec(small, blockBytes);
    this.requested_bytes.dec(small, requestedBytes);
  }

  resetPeak(): void {
    for (const name of STAT_NAMES) this[name].resetPeak();
    this.oversize_allocations.resetPeak();
    this.oversize_segments.resetPeak();
  }

  toRecord(): AllocatorStats {
    const out: Record<string, number> = {};
    const put = (prefix: string, s: Stat): void => {
      out[`${prefix}.current`] = s.current;
      out[`${prefix}.peak`] = s.peak;
      out[`${prefix}.allocated`] = s.allocated;
      out[`${prefix}.freed`] = s.freed;
    };
    for (const name of STAT_NAMES) {
      const stat = this[name];
      put(`${name}.all`, stat.all);
      put(`${name}.small_pool`, stat.small);
      put(`${name}.large_pool`, stat.large);
    }
    put('oversize_allocations', this.oversize_allocations);
    put('oversize_segments', this.oversize_segments);
    const counters: Record<CounterName, number> = {
      num_alloc_retries: this.num_alloc_retries,
      num_ooms: this.num_ooms,
      num_device_alloc: this.num_device_alloc,
      num_device_free: this.num_device_free,
      num_sync_all_streams: this.num_sync_all_streams,
      max_split_size: this.max_split_size,
    };
    Object.assign(out, counters);
    return out as Record<StatKey, number>;
  }
}
