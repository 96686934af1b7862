import type { AllocateOptions, Allocator } from '../contracts/Allocator.js';
import type { DataPtr } from '../storage/DataPtr.js';
import { formatDevice } from '../contracts/Device.js';
import { formatBytes } from '../units/formatBytes.js';
import type { ForwardingAllocatorOptions } from '../allocators/ForwardingAllocator.js';
import { ForwardingAllocator } from '../allocators/ForwardingAllocator.js';
import { checkUpstream } from '../internal/checkUpstream.js';
import { checkAdaptorOptions } from './checkAdaptorOptions.js';
import { checkBoolean, checkCount } from '../validation/validate.js';

/** Options of a {@link TrackingAllocator}. */
export interface TrackingAllocatorOptions extends ForwardingAllocatorOptions {
  /** Capture a stack trace at every allocation (default true). Off, records carry no stack. */
  readonly captureStacks?: boolean;
}

/** A live allocation a {@link TrackingAllocator} handed out. */
export interface TrackedAllocation {
  /**
   * The pointer the allocation was returned as. It may read `isReleased` while the memory lives on under another
   * owner (see the class comment): the record describes memory, not the pointer object.
   */
  readonly ptr: DataPtr;
  readonly address: number;
  /** Requested bytes. */
  readonly bytes: number;
  /**
   * The allocating call's stack, innermost frame first, one line per frame (`at f (file:1:2)` in V8), without
   * the adaptor's own frame; undefined when stacks are not captured or the engine gives none. Its depth is the
   * engine's (V8: `Error.stackTraceLimit`, 10 frames by default, one of them the adaptor's).
   */
  readonly stack: string | undefined;
}

/** What the adaptor keeps per live pointer. */
interface Tracked {
  readonly ptr: DataPtr;
  readonly bytes: number;
  /** `new Error().stack` at allocation, raw; trimmed to the caller's frames only when asked for. */
  readonly rawStack: string | undefined;
}

/** The message of the Error whose stack is captured; V8 starts the stack with `Error: <message>`. */
const TRACE_MESSAGE = 'allocated here';

/**
 * Tracks every live allocation this adaptor handed out, with its requested size and the stack that allocated it,
 * after RMM's `tracking_resource_adaptor`: a leak finder. `outstanding()` lists the live allocations,
 * `reportLeaks()` renders them for a person (call it before `dispose()`, or at the end of a test).
 *
 * A record is dropped when its memory is freed, by any path (Note [Adopting pointers]). When COW or IPC takes
 * ownership of an allocation (a lazy clone; a storage shared with another thread), the pointer first returned
 * may be released while its memory lives on, held by the new owner, which frees it later through this adaptor:
 * the record stays until then, with `ptr.isReleased` true. Data shared by `shareCow` but never received is such
 * memory: its descriptor holds a reference for the sender's lifetime (Note [COW across threads]). A stack is formatted
 * to text at allocation (an unformatted V8 stack would keep the callers' receivers reachable, and so change
 * what the garbage collector may reclaim), which costs a few microseconds per allocation; with
 * `captureStacks: false` tracking costs one map entry.
 *
 * Invariants: outstanding().length == number of allocations this adaptor returned whose memory is not yet freed;
 * outstandingBytes == sum of their requested bytes.
 */
export class TrackingAllocator extends ForwardingAllocator {
  readonly #captureStacks: boolean;
  /** Live pointers in allocation order. */
  readonly #live = new Map<DataPtr, Tracked>();
  #outstandingBytes = 0;

  /**
   * @throws InvalidArgumentError when `upstream` is not an allocator, `options.captureStacks` is not a boolean, or
   * the options are otherwise bad (see `checkAdaptorOptions`)
   */
  constructor(upstream: Allocator, given: TrackingAllocatorOptions = {}) {
    checkUpstream(upstream);
    const options = checkAdaptorOptions(given, ['captureStacks']);
    const captureStacks = checkBoolean('options.captureStacks', options.captureStacks) ?? true;
    super(upstream, options);
    this.#captureStacks = captureStacks;
  }

  /** Requested bytes of the live pointers this adaptor returned. */
  get outstandingBytes(): number {
    return this.#outstandingBytes;
  }

  override allocate(nbytes: number, options?: AllocateOptions): DataPtr {
    this.checkOpen('allocate');
    const rawStack = this.#captureStacks ? new Error(TRACE_MESSAGE).stack : undefined;
    const ptr = super.allocate(nbytes, options);
    this.#live.set(ptr, { ptr, bytes: ptr.byteLength, rawStack });
    this.#outstandingBytes += ptr.byteLength;
    return ptr;
  }

  /** The live allocations this adaptor returned, oldest first, as fresh records. */
  outstanding(): TrackedAllocation[] {
    return [...this.#live.values()].map((t) => ({ ptr: t.ptr, address: t.ptr.address, bytes: t.bytes, stack: callerStack(t.rawStack) }));
  }

  /**
   * A readable report of the live allocations: a summary line, then per allocation its size, address and the
   * first `framesPerLeak` frames of its stack. Returns '' when nothing is outstanding.
   * @throws InvalidArgumentError when `framesPerLeak` is not a non-negative integer
   */
  reportLeaks(framesPerLeak = 5): string {
    checkCount('framesPerLeak', framesPerLeak);
    const leaks = this.outstanding();
    if (leaks.length === 0) return '';
    const plural = leaks.length === 1 ? 'allocation' : 'allocations';
    const lines = [`${leaks.length} ${plural} (${formatBytes(this.#outstandingBytes)}) still outstanding on ${formatDevice(this.device)}:`];
    for (const leak of leaks) {
      const frames = leak.stack === undefined ? [] : leak.stack.split('\n').slice(0, framesPerLeak);
      const where = leak.stack === undefined ? ' (no stack captured)' : frames.length > 0 ? ', allocated' : '';
      lines.push(`  ${formatBytes(leak.bytes)} at 0x${leak.address.toString(16)}${where}`);
      for (const frame of frames) lines.push(`      ${frame}`);
    }
    return lines.join('\n');
  }

  protected override onReleased(ptr: DataPtr): void {
    const tracked = this.#live.get(ptr);
    if (tracked === undefined) return;
    this.#live.delete(ptr);
    this.#outstandingBytes -= tracked.bytes;
  }
}

/**
 * The frames of `rawStack` below this adaptor, trimmed, one per line, or undefined when none is left: V8's
 * leading `Error: allocated here` line and the first frame (this adaptor's `allocate`, where the Error was made)
 * are dropped. Counting the frame rather than matching its file keeps callers' frames in a bundle that holds
 * this module too.
 */
function callerStack(rawStack: string | undefined): string | undefined {
  if (rawStack === undefined) return undefined;
  const lines = rawStack.split('\n').map((line) => line.trim());
  if (lines[0]?.endsWith(TRACE_MESSAGE)) lines.shift();
  const frames = lines.filter((line) => line !== '').slice(1);
  return frames.length > 0 ? frames.join('\n') : undefined;
}
