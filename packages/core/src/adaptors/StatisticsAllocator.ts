import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import type { DataPtr } from '../storage/DataPtr.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import type { ForwardingAllocatorOptions } from '../allocators/ForwardingAllocator.js';
import { ForwardingAllocator } from '../allocators/ForwardingAllocator.js';
import { checkUpstream } from '../internal/checkUpstream.js';
import { checkAdaptorOptions } from './checkAdaptorOptions.js';

/** One figure, after RMM's `statistics_resource_adaptor::counter`. */
export interface StatisticsCounter {
  /** Allocated minus freed in the frame; negative when the frame freed what an enclosing frame allocated. */
  readonly current: number;
  /** The highest `current` reached in the frame (including what its popped scopes reached on top of it). */
  readonly peak: number;
  /** Everything allocated in the frame, never decreased. */
  readonly total: number;
}

/** The counters of one frame: requested bytes, and the number of allocations. */
export interface StatisticsCounters {
  readonly bytes: StatisticsCounter;
  readonly count: StatisticsCounter;
}

/** Options of a {@link StatisticsAllocator}. */
export type StatisticsAllocatorOptions = ForwardingAllocatorOptions;

/** A mutable counter; see {@link StatisticsCounter}. Invariants: peak >= current; total >= peak >= 0. */
class Counter implements StatisticsCounter {
  current = 0;
  peak = 0;
  total = 0;

  add(amount: number): void {
    this.current += amount;
    this.total += amount;
    if (this.current > this.peak) this.peak = this.current;
  }

  subtract(amount: number): void {
    this.current -= amount;
  }

  /** Folds a popped child frame in: RMM's `add_counters_from_tracked_sub_block`. */
  fold(child: StatisticsCounter): void {
    this.peak = Math.max(this.peak, this.current + child.peak);
    this.current += child.current;
    this.total += child.total;
  }

  resetPeak(): void {
    this.peak = this.current;
  }

  snapshot(): StatisticsCounter {
    return { current: this.current, peak: this.peak, total: this.total };
  }
}

interface Frame {
  readonly bytes: Counter;
  readonly count: Counter;
}

const newFrame = (): Frame => ({ bytes: new Counter(), count: new Counter() });
const snapshotOf = (frame: Frame): StatisticsCounters => ({ bytes: frame.bytes.snapshot(), count: frame.count.snapshot() });

/**
 * Cheap, always-on counters of the requested bytes and the number of allocations this adaptor handed out, after
 * RMM's `statistics_resource_adaptor`, independent of the upstream's `memoryStats()` (which pass through).
 *
 * Counters live in a stack of frames. Every allocation and every release (by any path; Note [Adopting
 * pointers]) updates only the innermost frame. `pushScope()` opens a fresh frame; `popScope()` closes it,
 * returns its figures, and folds them into the enclosing frame: current and total add up, and
 * `peak = max(peak, current + child.peak)`, the enclosing frame's level at the push plus the scope's own peak.
 * A frame's `current` goes negative when it frees pointers allocated before it was pushed.
 *
 * Invariants: the outermost frame is never popped; the sum of `bytes.current` over all frames == requested bytes
 * of the live pointers this adaptor returned, and likewise `count.current` == their number.
 */
export class StatisticsAllocator extends ForwardingAllocator {
  /** Outermost first; never empty. */
  readonly #frames: Frame[] = [newFrame()];

  /** @throws InvalidArgumentError when `upstream` is not an allocator, or the options are bad (see `checkAdaptorOptions`) */
  constructor(upstream: Allocator, options: StatisticsAllocatorOptions = {}) {
    super(checkUpstream(upstream), checkAdaptorOptions(options));
  }

  /** Scopes pushed and not yet popped; 0 when only the outermost frame is open. */
  get openScopes(): number {
    return this.#frames.length - 1;
  }

  /** The figures of the innermost frame (the outermost one when no scope is open), as a copy. */
  counters(): StatisticsCounters {
    return snapshotOf(this.#top());
  }

  /** Opens a scope: a fresh frame with every figure at 0 that counts until the matching `popScope()`. Returns the enclosing frame's figures. */
  pushScope(): StatisticsCounters {
    const enclosing = snapshotOf(this.#top());
    this.#frames.push(newFrame());
    return enclosing;
  }

  /**
   * Closes the innermost scope: returns its figures and folds them into the enclosing frame.
   * @throws InvalidArgumentError when no scope is open (`openScopes` is 0); nothing changes
   */
  popScope(): StatisticsCounters {
    if (this.#frames.length < 2) throw new InvalidArgumentError('openScopes', 0, 'at least 1 to call popScope() (call pushScope() first)');
    const child = this.#frames.pop()!;
    const parent = this.#top();
    parent.bytes.fold(child.bytes);
    parent.count.fold(child.count);
    return snapshotOf(child);
  }

  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    const ptr = super.allocate(nbytes, options);
    const frame = this.#top();
    frame.bytes.add(ptr.byteLength);
    frame.count.add(1);
    return ptr;
  }

  /** Resets the upstream's peaks, and every frame's peaks here, to their current figures. */
  override resetPeakStats(): void {
    super.resetPeakStats();
    for (const frame of this.#frames) {
      frame.bytes.resetPeak();
      frame.count.resetPeak();
    }
  }

  protected override onReleased(ptr: DataPtr): void {
    const frame = this.#top();
    frame.bytes.subtract(ptr.byteLength);
    frame.count.subtract(1);
  }

  #top(): Frame {
    return this.#frames[this.#frames.length - 1]!;
  }
}
