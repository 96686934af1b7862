/**
 * A snapshot's `device_traces` as a replayable trace (the JSON-lines format of `shared/traces`, which
 * `readTrace` and `replayTrace` in `@stowage/lab/replay` take).
 *
 * - Allocations are linked to their frees by address: an `alloc` opens a new id at its address; the
 *   `free_requested` and `free_completed` that follow at that address carry that id.
 * - A free of an address that no recorded `alloc` opened belongs to an allocation live before recording began: it
 *   becomes a `pre: true` alloc of the free's size at the front of the trace, as in `shared/traces`.
 * - So does every block still allocated (or pending free) in the snapshot's segments whose address no recorded
 *   allocation holds at the end: it was live for the whole trace.
 * - `segment_*` and `oom` entries are kept with id -1 (replay skips them; they are PyTorch's own decisions);
 *   `snapshot` entries are left out. `timeUs` counts from the first entry's `time_us`; pre allocations have none.
 * - Every event carries the device index it came from (`device`).
 */
import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotTraceEntry } from '@stowage/core/plugin-kit';
import { InvalidArgumentError } from '@stowage/core';
import type { TraceEvent } from '@stowage/lab/replay';

export interface TraceEventsOptions {
  /** Which device's trace: the index into `device_traces`. Default 0. */
  readonly device?: number;
}

type MutableEvent = { -readonly [K in keyof TraceEvent]: TraceEvent[K] };

/**
 * The trace of one device of `snapshot`, ready for `replayTrace`.
 * @throws InvalidArgumentError when `options.device` is not a non-negative integer
 */
export function toTraceEvents(snapshot: MemorySnapshot, options: TraceEventsOptions = {}): TraceEvent[] {
  const device = options.device ?? 0;
  if (!Number.isSafeInteger(device) || device < 0) throw new InvalidArgumentError('options.device', device, 'a non-negative integer (an index into device_traces)');
  const entries: readonly SnapshotTraceEntry[] = snapshot.device_traces[device] ?? [];
  const pre: MutableEvent[] = [];
  const recorded: MutableEvent[] = [];
  /** The id live at each address (allocated, or freed but not yet completed). */
  const live = new Map<number, number>();
  let nextId = 0;
  const origin = entries.find((e) => e.action !== 'snapshot')?.time_us ?? 0;
  for (const e of entries) {
    const base = { size: e.size, stream: e.stream, addr: e.addr, device, timeUs: e.time_us - origin };
    switch (e.action) {
      case 'alloc': {
        const id = nextId++;
        live.set(e.addr, id);
        recorded.push({ action: 'alloc', id, ...base });
        break;
      }
      case 'free_requested':
      case 'free_completed': {
        let id = live.get(e.addr);
        if (id === undefined) {
          id = nextId++;
          pre.push({ action: 'alloc', id, size: e.size, stream: e.stream, addr: e.addr, device, pre: true, timeUs: null });
          live.set(e.addr, id);
        }
        if (e.action === 'free_completed') live.delete(e.addr);
        recorded.push({ action: e.action, id, ...base });
        break;
      }
      case 'oom':
        recorded.push({ action: 'oom', id: -1, ...base, ...(e.device_free === undefined ? {} : { deviceFree: e.device_free }) });
        break;
      case 'snapshot':
        break;
      default:
        recorded.push({ action: e.action, id: -1, ...base });
    }
  }
  for (const segment of snapshot.segments) {
    if (segment.device !== device) continue;
    for (const b of segment.blocks) {
      if (b.state === 'inactive' || live.has(b.address)) continue;
      pre.push({ action: 'alloc', id: nextId++, size: b.requested_size, stream: segment.stream, addr: b.address, device, pre: true, timeUs: null });
    }
  }
  return [...pre, ...recorded];
}

/**
 * Trace events as the JSON lines of `shared/traces` (`{"seq","action","addr","size","stream","device","t_us","id","pre"}`,
 * one per line, each line ending in a newline), which `readTrace` reads back as the same events. `device` is each
 * event's own, else the argument.
 */
export function formatTraceLines(events: readonly TraceEvent[], device = 0): string {
  let out = '';
  events.forEach((e, seq) => {
    const line: Record<string, unknown> = { seq, action: e.action, addr: e.addr ?? null, size: e.size, stream: e.stream, device: e.device ?? device, t_us: e.timeUs ?? null, id: e.id < 0 ? null : e.id };
    if (e.pre) line.pre = true;
    if (e.deviceFree !== undefined) line.device_free = e.deviceFree;
    out += `${JSON.stringify(line)}\n`;
  });
  return out;
}
