/** One JSON line of the bench: one allocator's pass over one trace. Bytes are bytes. */
export interface PassLine {
  readonly allocator: string;
  readonly trace: string;
  /**
   * 'cold' pays for buffer creation; 'warm' replays again on the same allocator (its own cost); 'steady' is the
   * best of several more (caching allocators only).
   */
  readonly pass: 'cold' | 'warm' | 'steady';
  readonly ops: number;
  readonly opsPerSec: number;
  readonly createBufferCalls: number;
  /** Peak of the scaled requested bytes live (the same for every allocator). */
  readonly peakAllocated: number;
  readonly peakReserved: number;
  /** Peak resident memory during the pass above the level before the cold pass. */
  readonly rssAboveBaseline: number;
  /** The main thread's time on a CPU during the timed loop (Linux only; CpuClock.ts). */
  readonly mainThreadCpuMs?: number;
  /** Time the main thread was runnable but other threads of the machine had the CPUs (Linux only). */
  readonly mainThreadWaitMs?: number;
  /** CPU time of all the process's threads during the timed loop: the JIT's and the driver's threads too. */
  readonly processCpuMs: number;
  /** Why the pass stopped early, when it did. */
  readonly failed?: string;
}
