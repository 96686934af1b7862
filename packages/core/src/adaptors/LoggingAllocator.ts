import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import type { DataPtr } from '../storage/DataPtr.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { OutOfMemoryError } from '../errors/OutOfMemoryError.js';
import type { ForwardingAllocatorOptions } from '../allocators/ForwardingAllocator.js';
import { ForwardingAllocator } from '../allocators/ForwardingAllocator.js';
import { checkUpstream } from '../internal/checkUpstream.js';
import { checkAdaptorOptions } from './checkAdaptorOptions.js';
import { checkCount } from '../validation/validate.js';
import type { RmmLogAction } from './parseRmmCsv.js';
import { RMM_CSV_HEADER } from './parseRmmCsv.js';

/** Options of a {@link LoggingAllocator}. */
export interface LoggingAllocatorOptions extends ForwardingAllocatorOptions {
  /** The Thread column: 0 (the default) for the main thread; a worker may pass its `worker_threads` `threadId`. */
  readonly threadId?: number;
  /** The Stream column of allocations whose options name no stream. Default 0. */
  readonly stream?: number;
  /**
   * Milliseconds since an arbitrary origin; default `performance.now()`. The Time column is measured from its
   * value at construction. Tests pass a fake clock for exact lines.
   */
  readonly clock?: () => number;
}

/**
 * Logs every allocation and free in RMM's replay format (`logging_resource_adaptor`), one CSV line per event
 * to `sink`, which parseRmmCsv reads back and a replay benchmark can rerun:
 *
 * ```text
 * Thread,Time,Action,Pointer,Size,Stream
 * 0,0.000125,allocate,0x4000,1024,0
 * 0,0.002000,free,0x4000,1024,0
 * ```
 *
 * The header is written at construction. Time is seconds since construction with six decimals (microseconds);
 * Pointer is the address in hex; Size the requested bytes; Stream the allocation's `options.stream`, else the
 * adaptor's `stream` option. `allocate` is logged after the upstream returned, `free` before the upstream
 * frees, on every release path (Note [Adopting pointers]); a free is logged with its allocation's stream. When
 * the upstream throws OutOfMemoryError, an `allocate failure` line with Pointer `0x0` is logged and the error
 * rethrown; calls rejected for bad arguments are not logged.
 *
 * `sink` should not throw. If it throws on the header, the constructor throws; on an `allocate` line, the
 * pointer is freed (unlogged) and the sink's error propagates; on a `free` line, the pointer is still freed and
 * the error propagates from the release.
 *
 * Invariant: every pointer this adaptor returned and has not seen released has exactly one `allocate` line and
 * no `free` line after it.
 */
export class LoggingAllocator extends ForwardingAllocator {
  readonly #sink: (line: string) => void;
  readonly #clock: () => number;
  /** The clock's reading at construction, in milliseconds. */
  readonly #originMs: number;
  readonly #threadId: number;
  readonly #defaultStream: number;
  /** The stream each logged live pointer was allocated on. */
  readonly #live = new Map<DataPtr, number>();

  /**
   * @throws InvalidArgumentError when `upstream` is not an allocator, `sink` or `options.clock` is not a function,
   *   `options.threadId` or `options.stream` is not a non-negative integer, or the options are otherwise bad (see
   *   `checkAdaptorOptions`)
   */
  constructor(upstream: Allocator, sink: (line: string) => void, given: LoggingAllocatorOptions = {}) {
    checkUpstream(upstream);
    if (typeof sink !== 'function') throw new InvalidArgumentError('sink', sink, 'a function that takes one log line');
    const options = checkAdaptorOptions(given, ['threadId', 'stream', 'clock']);
    const clock = options.clock ?? (() => performance.now());
    if (typeof clock !== 'function') throw new InvalidArgumentError('options.clock', clock, 'a function returning milliseconds');
    const threadId = checkCount('options.threadId', options.threadId ?? 0);
    const stream = checkCount('options.stream', options.stream ?? 0);
    super(upstream, options);
    this.#sink = sink;
    this.#clock = clock;
    this.#threadId = threadId;
    this.#defaultStream = stream;
    this.#originMs = clock();
    sink(RMM_CSV_HEADER);
  }

  /**
   * Allocates through the upstream and logs the outcome.
   * @throws InvalidArgumentError when `options.stream` is given and is not a non-negative integer (not logged)
   * @throws whatever the upstream throws; an OutOfMemoryError is logged as `allocate failure` first
   */
  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    const stream = options?.stream === undefined ? this.#defaultStream : checkCount('options.stream', options.stream);
    let ptr: DataPtr;
    try {
      ptr = super.allocate(nbytes, options);
    } catch (error) {
      if (error instanceof OutOfMemoryError) this.#log('allocate failure', 0, nbytes, stream);
      throw error;
    }
    try {
      this.#log('allocate', ptr.address, ptr.byteLength, stream);
    } catch (error) {
      ptr.release(); // not in #live yet, so onReleased logs nothing
      throw error;
    }
    this.#live.set(ptr, stream);
    return ptr;
  }

  protected override onReleased(ptr: DataPtr): void {
    const stream = this.#live.get(ptr);
    if (stream === undefined) return;
    this.#live.delete(ptr);
    this.#log('free', ptr.address, ptr.byteLength, stream);
  }

  #log(action: RmmLogAction, address: number, size: number, stream: number): void {
    const seconds = Math.max(0, this.#clock() - this.#originMs) / 1000;
    this.#sink(`${this.#threadId},${seconds.toFixed(6)},${action},0x${address.toString(16)},${size},${stream}`);
  }
}
