import type { AllocatorStats, CounterName, StatKey, StatName } from '../contracts/AllocatorStats.js';

// Note [Flat statistics]: every statistic lives in one Float64Array of four-slot records (current, peak, allocated,
// freed); Stat and PooledStat are views over it. The hot path's counts (countAllocated, countFreed,
// countInactive) update the records of five statistics in a few straight-line calls instead of thirty method
// calls on separate objects: before V8 has optimized the engine (a program's first steps, every bench's warm
// pass) each call costs about as much as the work it does.
const CURRENT = 0;
const PEAK = 1;
const ALLOCATED = 2;
const FREED = 3;
/** Offsets of a pooled statistic's records: all, small pool, large pool. */
const ALL = 0;
const SMALL = 4;
const LARGE = 8;
const POOLED_SLOTS = 12;

/** Adds a non-negative `amount` to the record at `at`. */
function incAt(v: Float64Array, at: number, amount: number): void {
  const current = (v[at + CURRENT] = v[at + CURRENT]! + amount);
  v[at + ALLOCATED] = v[at + ALLOCATED]! + amount;
  if (current > v[at + PEAK]!) v[at + PEAK] = current;
}

/** Subtracts a non-negative `amount` from the record at `at`. */
function decAt(v: Float64Array, at: number, amount: number): void {
  v[at + CURRENT] = v[at + CURRENT]! - amount;
  v[at + FREED] = v[at + FREED]! + amount;
}

/** `incAt` on a pooled statistic's `all` record and on its pool's (`pool` is SMALL or LARGE), written out. */
function incPooled(v: Float64Array, base: number, pool: number, amount: number): void {
  let current = (v[base + CURRENT] = v[base + CURRENT]! + amount);
  v[base + ALLOCATED] = v[base + ALLOCATED]! + amount;
  if (current > v[base + PEAK]!) v[base + PEAK] = current;
  const at = base + pool;
  current = v[at + CURRENT] = v[at + CURRENT]! + amount;
  v[at + ALLOCATED] = v[at + ALLOCATED]! + amount;
  if (current > v[at + PEAK]!) v[at + PEAK] = current;
}

/** `decAt` on a pooled statistic's `all` record and on its pool's, written out. */
function decPooled(v: Float64Array, base: number, pool: number, amount: number): void {
  v[base + CURRENT] = v[base + CURRENT]! - amount;
  v[base + FREED] = v[base + FREED]! + amount;
  const at = base + pool;
  v[at + CURRENT] = v[at + CURRENT]! - amount;
  v[at + FREED] = v[at + FREED]! + amount;
}

/** One statistic with PyTorch's four fields. Invariant: current == allocated - freed; peak >= current. */
export class Stat {
  constructor(
    private readonly values: Float64Array,
    private readonly at: number,
  ) {}

  get current(): number {
    return this.values[this.at + CURRENT]!;
  }

  get peak(): number {
    return this.values[this.at + PEAK]!;
  }

  get allocated(): number {
    return this.values[this.at + ALLOCATED]!;
  }

  get freed(): number {
    return this.values[this.at + FREED]!;
  }

  /** Adds `amount` (negative to subtract), counting it as allocated or freed. */
  add(amount: number): void {
    if (amount >= 0) incAt(this.values, this.at, amount);
    else decAt(this.values, this.at, -amount);
  }

  /** `add` for a known non-negative amount (the hot path's increments). */
  inc(amount: number): void {
    incAt(this.values, this.at, amount);
  }

  /** `add(-amount)` for a known non-negative amount. */
  dec(amount: number): void {
    decAt(this.values, this.at, amount);
  }

  resetPeak(): void {
    this.values[this.at + PEAK] = this.values[this.at + CURRENT]!;
  }
}

/** A statistic broken down by pool. Invariant: all == small + large (for each field). */
export class PooledStat {
  readonly all: Stat;
  readonly small: Stat;
  readonly large: Stat;

  constructor(
    private readonly values: Float64Array,
    private readonly base: number,
  ) {
    this.all = new Stat(values, base + ALL);
    this.small = new Stat(values, base + SMALL);
    this.large = new Stat(values, base + LARGE);
  }

  add(small: boolean, amount: number): void {
    if (amount >= 0) incPooled(this.values, this.base, small ? SMALL : LARGE, amount);
    else decPooled(this.values, this.base, small ? SMALL : LARGE, -amount);
  }

  inc(small: boolean, amount: number): void {
    incPooled(this.values, this.base, small ? SMALL : LARGE, amount);
  }

  dec(small: boolean, amount: number): void {
    decPooled(this.values, this.base, small ? SMALL : LARGE, amount);
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

function baseOf(name: StatName): number {
  return STAT_NAMES.indexOf(name) * POOLED_SLOTS;
}

const ALLOCATION = baseOf('allocation');
const ALLOCATED_BYTES = baseOf('allocated_bytes');
const RESERVED_BYTES = baseOf('reserved_bytes');
const ACTIVE = baseOf('active');
const ACTIVE_BYTES = baseOf('active_bytes');
const REQUESTED_BYTES = baseOf('requested_bytes');

/**
 * The statistics of one allocator under PyTorch's names, as fields for the hot path, flattened to
 * `memoryStats()` keys on demand.
 */
export class StatsBook {
  /** Every statistic's records (Note [Flat statistics]): the pooled ones in STAT_NAMES order, then the two oversize ones. */
  readonly #values = new Float64Array(STAT_NAMES.length * POOLED_SLOTS + 8);
  readonly allocation = this.#pooled('allocation');
  readonly segment = this.#pooled('segment');
  readonly active = this.#pooled('active');
  readonly inactive_split = this.#pooled('inactive_split');
  readonly allocated_bytes = this.#pooled('allocated_bytes');
  readonly reserved_bytes = this.#pooled('reserved_bytes');
  readonly active_bytes = this.#pooled('active_bytes');
  readonly inactive_split_bytes = this.#pooled('inactive_split_bytes');
  readonly requested_bytes = this.#pooled('requested_bytes');
  readonly oversize_allocations = new Stat(this.#values, STAT_NAMES.length * POOLED_SLOTS);
  readonly oversize_segments = new Stat(this.#values, STAT_NAMES.length * POOLED_SLOTS + 4);
  num_alloc_retries = 0;
  num_ooms = 0;
  num_device_alloc = 0;
  num_device_free = 0;
  num_sync_all_streams = 0;
  max_split_size = 0;

  /** A block of `blockBytes` was handed out for a request of `requestedBytes`: it is allocated and active. */
  countAllocated(small: boolean, blockBytes: number, requestedBytes: number): void {
    const v = this.#values;
    const pool = small ? SMALL : LARGE;
    incPooled(v, ALLOCATION, pool, 1);
    incPooled(v, ALLOCATED_BYTES, pool, blockBytes);
    incPooled(v, ACTIVE, pool, 1);
    incPooled(v, ACTIVE_BYTES, pool, blockBytes);
    incPooled(v, REQUESTED_BYTES, pool, requestedBytes);
  }

  /** The caller freed a block: no longer allocated (still active until it is reusable). */
  countFreed(small: boolean, blockBytes: number): void {
    const v = this.#values;
    const pool = small ? SMALL : LARGE;
    decPooled(v, ALLOCATION, pool, 1);
    decPooled(v, ALLOCATED_BYTES, pool, blockBytes);
  }

  /** A freed block became reusable: no longer active. */
  countInactive(small: boolean, blockBytes: number, requestedBytes: number): void {
    const v = this.#values;
    const pool = small ? SMALL : LARGE;
    decPooled(v, ACTIVE, pool, 1);
    decPooled(v, ACTIVE_BYTES, pool, blockBytes);
    decPooled(v, REQUESTED_BYTES, pool, requestedBytes);
  }

  /** Bytes allocated now (`allocated_bytes.all.current`), read without the views. */
  get allocatedBytes(): number {
    return this.#values[ALLOCATED_BYTES + ALL + CURRENT]!;
  }

  /** Bytes reserved now (`reserved_bytes.all.current`), read without the views. */
  get reservedBytes(): number {
    return this.#values[RESERVED_BYTES + ALL + CURRENT]!;
  }

  #pooled(name: StatName): PooledStat {
    return new PooledStat(this.#values, baseOf(name));
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
