import { formatBytes } from '@stowage/core';

/** One allocator event as the exports read it: a trace event, or an entry of a snapshot's `device_traces`. */
export interface AllocatorEventRecord {
  /** A trace action (`alloc`, `free_requested`, `segment_alloc`…) or an LMS/IPC one (`page_out`, `ipc_limbo`…). */
  readonly action: string;
  readonly addr?: number | undefined;
  readonly size: number;
  readonly stream: number;
  /** Microseconds since the first event, when recorded. */
  readonly timeUs?: number | null | undefined;
}

/** A Trace Event Format event (the JSON chrome://tracing and Perfetto open). */
export interface ChromeTraceEvent {
  readonly name: string;
  readonly ph: 'C' | 'b' | 'e' | 'i' | 'M';
  readonly ts: number;
  readonly pid: number;
  readonly tid: number;
  readonly cat?: string;
  readonly id?: string;
  readonly s?: 'p' | 't' | 'g';
  readonly args?: Readonly<Record<string, unknown>>;
}

/** The file `stowage trace --chrome` writes. */
export interface ChromeTrace {
  readonly traceEvents: ChromeTraceEvent[];
  readonly displayTimeUnit: 'ms';
  readonly otherData: Readonly<Record<string, string>>;
}

const PID = 1;

/**
 * Allocator events in the Trace Event Format: a `memory` counter track (allocated and reserved bytes after each
 * event), each allocation as an async slice from its alloc to its free on its stream's track (so overlapping
 * lifetimes stack), segment, out-of-memory, LMS and IPC events as instants on their stream's track, and the moments
 * a snapshot was taken (`snapshot` entries) as instants across all tracks. Timestamps are the events'
 * microseconds when every event has one, else the event's index (one "microsecond" per event).
 * Allocated bytes leave at `free_completed` (at `free_requested` in a trace with no `free_completed`).
 */
export function toChromeTrace(events: readonly AllocatorEventRecord[], source: string): ChromeTrace {
  const timed = events.length > 0 && events.every((e) => typeof e.timeUs === 'number');
  const completes = events.some((e) => e.action === 'free_completed');
  const out: ChromeTraceEvent[] = [{ name: 'process_name', ph: 'M', ts: 0, pid: PID, tid: 0, args: { name: `stowage: ${source}` } }];
  const streams = new Map<number, number>();
  const tidOf = (stream: number): number => {
    let tid = streams.get(stream);
    if (tid === undefined) {
      streams.set(stream, (tid = streams.size + 1));
      out.push({ name: 'thread_name', ph: 'M', ts: 0, pid: PID, tid, args: { name: `stream ${stream}` } });
    }
    return tid;
  };
  /** Open allocations by address: their slice id and size. */
  const open = new Map<number, { id: string; size: number }>();
  let nextId = 0;
  let allocated = 0;
  let reserved = 0;
  events.forEach((e, i) => {
    const ts = timed ? e.timeUs! : i;
    const tid = tidOf(e.stream);
    const addr = e.addr ?? -1 - i;
    let counted = true;
    switch (e.action) {
      case 'alloc': {
        const id = `a${nextId++}`;
        open.set(addr, { id, size: e.size });
        allocated += e.size;
        out.push({ name: formatBytes(e.size), ph: 'b', cat: 'allocation', id, ts, pid: PID, tid, args: { addr: hex(e.addr), size: e.size, stream: e.stream } });
        break;
      }
      case 'free_requested':
      case 'free_completed': {
        const slice = open.get(addr);
        if (slice === undefined || (completes && e.action === 'free_requested')) {
          counted = false;
          break;
        }
        open.delete(addr);
        allocated -= slice.size;
        out.push({ name: formatBytes(slice.size), ph: 'e', cat: 'allocation', id: slice.id, ts, pid: PID, tid });
        break;
      }
      case 'segment_alloc':
      case 'segment_map':
        reserved += e.size;
        out.push(instant(e, ts, tid, 'segment'));
        break;
      case 'segment_free':
      case 'segment_unmap':
        reserved -= e.size;
        out.push(instant(e, ts, tid, 'segment'));
        break;
      case 'snapshot':
        // A snapshot was taken here (its size: the active bytes then): one instant across every track.
        counted = false;
        out.push({ name: 'snapshot', ph: 'i', s: 'g', cat: 'snapshot', ts, pid: PID, tid, args: { activeBytes: e.size } });
        break;
      default:
        counted = false;
        out.push(instant(e, ts, tid, e.action.startsWith('ipc_') ? 'ipc' : e.action === 'oom' ? 'oom' : 'lms'));
    }
    if (counted) out.push({ name: 'memory', ph: 'C', ts, pid: PID, tid: 0, args: { allocated, reserved } });
  });
  return {
    traceEvents: out,
    displayTimeUnit: 'ms',
    otherData: { source, timestamps: timed ? 'microseconds since the first event' : 'event index (the trace has no times)' },
  };
}

function instant(e: AllocatorEventRecord, ts: number, tid: number, cat: string): ChromeTraceEvent {
  return { name: `${e.action} ${formatBytes(e.size)}`, ph: 'i', s: 'p', cat, ts, pid: PID, tid, args: { addr: hex(e.addr), size: e.size, stream: e.stream } };
}

function hex(addr: number | undefined): string | null {
  return addr === undefined ? null : `0x${addr.toString(16)}`;
}
