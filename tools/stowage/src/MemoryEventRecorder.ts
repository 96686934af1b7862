import type { Allocator, MemorySnapshot } from '@stowage/core';
import type { SnapshotTraceEntry } from '@stowage/core/plugin-kit';
import type { IpcEventSource } from '@stowage/ipc';
import type { LmsEventSource } from '@stowage/lms';
import type { AllocatorEventRecord } from './toChromeTrace.js';

/** One recorded event: an allocator action, or an LMS or IPC one, at microseconds since recording began. */
export interface RecordedEvent extends AllocatorEventRecord {
  readonly addr: number;
  readonly timeUs: number;
}

/** The actions LMS and IPC events record as (beside the allocator's `alloc`, `free_*`, `segment_*`, `oom`). */
export type MemoryEventAction = 'page_out' | 'page_in' | 'ipc_send' | 'ipc_receive' | 'ipc_limbo' | 'ipc_collect';

/**
 * Records what a running program's memory does, in one ordered list: an allocator's events (allocations, frees,
 * segments, out-of-memory), LMS page-outs and page-ins, and IPC sends, receives, limbo entries and collections.
 * The list feeds `toChromeTrace` and `buildVizPage` (`{ trace: recorder.events }`), which mark the LMS and IPC
 * events. Listeners record and return; nothing is allocated on the allocation path but the record.
 *
 * A free records `free_requested` when the caller frees, and `free_completed` when the block can be reused: at once
 * for a complete free, and at the allocator's `freeCompleted` event for one that waited on work using the block
 * (another stream; on WebGPU, the submit of the commands that bound it). So the allocated bytes a page draws from
 * the events agree with a snapshot taken between the two, where such a block is still `active_pending_free`.
 */
export class MemoryEventRecorder implements Disposable {
  readonly #events: RecordedEvent[] = [];
  readonly #detach: (() => void)[] = [];
  /** Requested bytes of each live allocation, by address (frees report no size). */
  readonly #sizes = new Map<number, number>();
  readonly #startMs = performance.now();

  /** The events recorded so far, in order. */
  get events(): readonly RecordedEvent[] {
    return this.#events;
  }

  /** Records `allocator`'s allocations, frees, segments and out-of-memory errors from now on. */
  attachAllocator(allocator: Allocator): this {
    const events = allocator.events;
    const allocated = (e: { ptr: { address: number }; requestedBytes: number }): void => {
      this.#sizes.set(e.ptr.address, e.requestedBytes);
      this.record('alloc', e.ptr.address, e.requestedBytes);
    };
    const freed = (e: { ptr: { address: number }; pending?: boolean }): void => {
      const size = this.#sizes.get(e.ptr.address) ?? 0;
      this.#sizes.delete(e.ptr.address);
      this.record('free_requested', e.ptr.address, size);
      if (e.pending !== true) this.record('free_completed', e.ptr.address, size);
    };
    const freeCompleted = (e: { address: number; requestedBytes: number }): void => this.record('free_completed', e.address, e.requestedBytes);
    const reserved = (e: { address: number; bytes: number }): void => this.record('segment_alloc', e.address, e.bytes);
    const released = (e: { address: number; bytes: number }): void => this.record('segment_free', e.address, e.bytes);
    const outOfMemory = (e: { requestedBytes: number }): void => this.record('oom', 0, e.requestedBytes);
    events.on('allocated', allocated);
    events.on('freed', freed);
    events.on('freeCompleted', freeCompleted);
    events.on('segmentReserved', reserved);
    events.on('segmentReleased', released);
    events.on('outOfMemory', outOfMemory);
    this.#detach.push(() => {
      events.off('allocated', allocated);
      events.off('freed', freed);
      events.off('freeCompleted', freeCompleted);
      events.off('segmentReserved', reserved);
      events.off('segmentReleased', released);
      events.off('outOfMemory', outOfMemory);
    });
    return this;
  }

  /** Records an LMS device's page-outs (`page_out`) and page-ins (`page_in`) from now on (`Residency#events`). */
  attachLms(events: LmsEventSource): this {
    const out = (e: { address: number; bytes: number }): void => this.record('page_out', e.address, e.bytes);
    const back = (e: { address: number; bytes: number }): void => this.record('page_in', e.address, e.bytes);
    events.on('pagedOut', out);
    events.on('pagedIn', back);
    this.#detach.push(() => {
      events.off('pagedOut', out);
      events.off('pagedIn', back);
    });
    return this;
  }

  /** Records IPC's sends, receives, limbo entries and collections from now on (`Ipc#events`). */
  attachIpc(events: IpcEventSource): this {
    const on = (name: 'sent' | 'received' | 'enteredLimbo' | 'collected', action: MemoryEventAction): void => {
      const listener = (e: { address: number; bytes: number }): void => this.record(action, e.address, e.bytes);
      events.on(name, listener);
      this.#detach.push(() => void events.off(name, listener));
    };
    on('sent', 'ipc_send');
    on('received', 'ipc_receive');
    on('enteredLimbo', 'ipc_limbo');
    on('collected', 'ipc_collect');
    return this;
  }

  /** Records one event (for a source without an emitter). */
  record(action: string, addr: number, size: number, stream = 0): void {
    this.#events.push({ action, addr, size, stream, timeUs: Math.round((performance.now() - this.#startMs) * 1000) });
  }

  /**
   * `snapshot` with the recorded events as its `device_traces[0]` (in the snapshot's entry form, LMS and IPC
   * actions included): what `stowage viz` and `stowage trace --chrome` read from a JSON file and draw with those
   * events marked. Take the snapshot when recording stops, so that the trace ends where it was taken. PyTorch's
   * viewer does not know the LMS and IPC actions: `writeSnapshotPickle` is for snapshots without them.
   */
  toSnapshot(snapshot: MemorySnapshot): MemorySnapshot {
    const entries = this.#events.map((e) => ({ action: e.action, addr: e.addr, size: e.size, stream: e.stream, time_us: e.timeUs, frames: [], compile_context: 'N/A', user_metadata: '' }));
    return { ...snapshot, device_traces: [entries as SnapshotTraceEntry[]] };
  }

  /** Stops listening; the events stay. Idempotent. */
  dispose(): void {
    for (const detach of this.#detach.splice(0)) detach();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
