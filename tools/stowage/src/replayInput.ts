import { dirname } from 'node:path';
import type { CachingAllocator, MemorySnapshot } from '@stowage/core';
import { InvalidArgumentError, parseBytes } from '@stowage/core';
import type { TraceEvent } from '@stowage/lab/replay';
import { findTraceRoot, readPytorchReference, replayTrace, traceSummary } from '@stowage/lab/replay';
import type { AllocatorConfig, DeviceOptions } from './allocatorConfigs.js';
import { createReplayAllocator } from './allocatorConfigs.js';
import type { Input } from './readInput.js';

const GIB = 2 ** 30;
/** The most trace entries a snapshot of a replay keeps. */
const MAX_HISTORY_ENTRIES = 1_000_000;

/** What a replay through one allocator configuration did. Bytes are requested bytes for live figures. */
export interface ReplayReport {
  readonly trace: string;
  readonly format: Input['format'];
  readonly allocator: string;
  readonly events: number;
  readonly allocs: number;
  readonly frees: number;
  readonly peakLiveBytes: number;
  readonly peakReservedBytes: number;
  /** Segments the engine created (`segment.all.allocated`). */
  readonly segments: number;
  /** Peak reserved over peak live; 0 when nothing was live. */
  readonly ratio: number;
  /** The device capacity replayed under, when bounded. */
  readonly capacityBytes: number | null;
  /** The operation that ran out of memory, or null when the replay completed. */
  readonly oomAtOp: number | null;
  readonly seconds: number;
  readonly opsPerSec: number;
}

/** PyTorch's own figures for a trace, and where they come from. */
export interface PytorchFigures {
  /** `traces README` (a cold-start table the trace root keeps) or `trace` (the trace's own segment events). */
  readonly source: 'traces README' | 'trace';
  /**
   * Segments PyTorch reserved; from the trace: its `segment_alloc` and `segment_map` events (an expandable
   * segment's maps counted as the traces README counts them).
   */
  readonly segments: number;
  readonly peakReservedBytes: number;
  readonly ratio: number;
}

/**
 * The figures of a snapshot Stowage recorded (an engine's snapshot, or a `MemoryEventRecorder` recording): what the
 * recording allocator did, counted from its trace's `segment_*` entries. Not PyTorch's.
 */
export interface RecordingFigures {
  /** What recorded it: `stowage <preset>` for an engine's snapshot, `stowage` for another allocator's recording. */
  readonly recordedBy: string;
  /** Segments reserved (`segment_alloc` entries); an expandable segment's page maps are not segments. */
  readonly segments: number;
  /** Page ranges mapped into expandable segments (`segment_map` entries). */
  readonly pageMaps: number;
  /** Peak of the bytes reserved: segments and mapped pages, less those released. */
  readonly peakReservedBytes: number;
  readonly ratio: number;
}

/** How to replay. */
export interface ReplayRunOptions extends Omit<DeviceOptions, 'streams'> {
  /** Allocate on the trace's streams (as ordinals) rather than all on the default one. */
  readonly streams?: boolean;
  /** Called as the replay goes (see `replayTrace`'s `onProgress`). */
  readonly onProgress?: (done: number, total: number) => void;
}

/**
 * Replays `input`'s trace through a fresh engine of `config` on a virtual device. When the trace ran out of memory
 * under PyTorch and no capacity is given, the device gets the capacity PyTorch's allocator had (traceSummary's
 * `capacityAtOomBytes`), so the replay meets the same pressure.
 * @throws InvalidArgumentError for a bad capacity or limit
 */
export function replayInput(input: Input, config: AllocatorConfig, options: ReplayRunOptions = {}): ReplayReport {
  const summary = traceSummary(input.events);
  const capacity = options.capacity ?? (summary.capacityAtOomBytes === undefined ? undefined : String(summary.capacityAtOomBytes));
  const engine = createReplayAllocator(config, { capacity, limit: options.limit, streams: options.streams ? summary.streams : 1 });
  try {
    const result = replayTrace(engine, input.events, { streams: options.streams ?? false, ...(options.onProgress ? { onProgress: options.onProgress } : {}) });
    const stats = engine.memoryStats();
    const peakReservedBytes = stats['reserved_bytes.all.peak'];
    return {
      trace: input.name,
      format: input.format,
      allocator: config.name,
      events: input.events.length,
      allocs: result.allocs,
      frees: result.frees,
      peakLiveBytes: result.peakLiveBytes,
      peakReservedBytes,
      segments: stats['segment.all.allocated'],
      ratio: result.peakLiveBytes > 0 ? peakReservedBytes / result.peakLiveBytes : 0,
      capacityBytes: capacity === undefined ? null : (parseBytes(capacity) ?? null),
      oomAtOp: result.failedAt?.op ?? null,
      seconds: result.seconds,
      opsPerSec: result.opsPerSec,
    };
  } finally {
    engine.dispose();
  }
}

/**
 * PyTorch's figures for `input`: the traces README's cold-start row for a trace of that name when the trace root
 * (found from the file's directory) has one, else the trace's own `segment_*` events when it has them and no
 * allocation predates the recording; undefined otherwise, and for a snapshot Stowage recorded (see
 * {@link recordingFigures}).
 */
export function pytorchFigures(input: Input): PytorchFigures | undefined {
  if (recordedBy(input) !== undefined) return undefined;
  const summary = traceSummary(input.events);
  const root = findTraceRoot(dirname(input.path));
  const row = root === undefined ? undefined : readPytorchReference(root).get(input.name);
  if (row !== undefined && Number.isFinite(row.segments) && Number.isFinite(row.peakReservedGiB)) {
    return { source: 'traces README', segments: row.segments, peakReservedBytes: Math.round(row.peakReservedGiB * GIB), ratio: row.ratio };
  }
  if (summary.peakReservedBytes === undefined || summary.preAllocs > 0) return undefined;
  return {
    source: 'trace',
    segments: summary.segmentAllocs + summary.segmentMaps,
    peakReservedBytes: summary.peakReservedBytes,
    ratio: summary.peakLiveBytes > 0 ? summary.peakReservedBytes / summary.peakLiveBytes : 0,
  };
}

/**
 * The recording allocator's figures for a snapshot Stowage recorded, from its trace's own `segment_*` entries
 * (when it has them and no allocation predates the recording); undefined for any other input.
 */
export function recordingFigures(input: Input): RecordingFigures | undefined {
  const by = recordedBy(input);
  if (by === undefined) return undefined;
  const summary = traceSummary(input.events);
  if (summary.peakReservedBytes === undefined || summary.preAllocs > 0) return undefined;
  return {
    recordedBy: by,
    segments: summary.segmentAllocs,
    pageMaps: summary.segmentMaps,
    peakReservedBytes: summary.peakReservedBytes,
    ratio: summary.peakLiveBytes > 0 ? summary.peakReservedBytes / summary.peakLiveBytes : 0,
  };
}

/**
 * What recorded a snapshot input when Stowage did: `stowage <preset>` when its `allocator_settings` name the
 * engine's preset (PyTorch's have no `preset`), `stowage` for a recording with LMS or IPC entries; else undefined.
 */
function recordedBy(input: Input): string | undefined {
  if (input.snapshot === undefined) return undefined;
  const preset = input.snapshot.allocator_settings?.preset;
  if (typeof preset === 'string') return `stowage ${preset}`;
  return input.recorded !== undefined ? 'stowage' : undefined;
}

/** Where `stowage snapshot` stops: an event index, the event at the peak of live bytes, or the last event. */
export type SnapshotMoment = number | 'peak' | 'end';

/**
 * Parses `--at`: a non-negative event index, `peak` or `end`.
 * @throws InvalidArgumentError for anything else
 */
export function parseMoment(value: string): SnapshotMoment {
  if (value === 'peak' || value === 'end') return value;
  if (/^\d+$/.test(value) && Number.isSafeInteger(Number(value))) return Number(value);
  throw new InvalidArgumentError('--at', value, "an event index (0 for the first event), 'peak' (the event at the peak of live bytes) or 'end'");
}

/** The index of the event `moment` names in `events`. @throws InvalidArgumentError for an index past the end */
export function momentIndex(events: readonly TraceEvent[], moment: SnapshotMoment): number {
  if (events.length === 0) return -1;
  if (moment === 'end') return events.length - 1;
  if (moment === 'peak') return peakIndex(events);
  if (moment >= events.length) throw new InvalidArgumentError('--at', moment, `an event index below ${events.length} (the trace's length), 'peak' or 'end'`);
  return moment;
}

/** A snapshot of a replay, and where the replay stopped. */
export interface ReplaySnapshot {
  readonly snapshot: MemorySnapshot;
  /** The index of the last event replayed: the moment asked for, or the one before the allocation that failed. */
  readonly index: number;
  readonly engine: string;
  /** Set when the replay ran out of memory before the moment asked for: the index of the event that failed. */
  readonly outOfMemoryAt: number | null;
}

/**
 * The engine's snapshot right after event `moment` of `input`'s trace, replayed through `config` with history
 * recorded from the first event (so `device_traces[0]` holds the whole replay up to that moment). When the replay
 * runs out of memory before it, the snapshot is the engine's state there (`outOfMemoryAt`).
 */
export function snapshotAt(input: Input, config: AllocatorConfig, moment: SnapshotMoment, options: ReplayRunOptions = {}): ReplaySnapshot {
  const index = momentIndex(input.events, moment);
  const engine: CachingAllocator = createReplayAllocator(config, { capacity: options.capacity, limit: options.limit, streams: options.streams ? traceSummary(input.events).streams : 1 });
  try {
    // Each event records one to three entries (a segment reserved or released beside it); releases of the cache
    // under pressure record one per segment. The margin keeps the whole replay in the history, up to a million
    // entries (about 150 MB); past that the snapshot keeps the latest, and the page starts where they start.
    engine.recordHistory({ maxEntries: Math.min(MAX_HISTORY_ENTRIES, 4 * (index + 1) + 4096) });
    const result = replayTrace(engine, input.events.slice(0, index + 1), {
      keepLive: true,
      streams: options.streams ?? false,
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    });
    const snapshot = engine.snapshot();
    for (const ptr of result.live ?? []) engine.free(ptr);
    const failed = result.failedAt?.event ?? null;
    return { snapshot, index: failed === null ? index : failed - 1, engine: config.name, outOfMemoryAt: failed };
  } finally {
    engine.dispose();
  }
}

/** The index of the first event at which the requested bytes live peak (as traceSummary counts them). */
function peakIndex(events: readonly TraceEvent[]): number {
  const requested = new Set<number>();
  for (const e of events) if (e.action === 'free_requested') requested.add(e.id);
  const live = new Map<number, number>();
  let current = 0;
  let peak = -1;
  let at = events.length - 1;
  events.forEach((e, i) => {
    if (e.action === 'alloc') {
      current += e.size - (live.get(e.id) ?? 0);
      live.set(e.id, e.size);
    } else if (e.action === 'free_requested' || (e.action === 'free_completed' && !requested.has(e.id))) {
      current -= live.get(e.id) ?? 0;
      live.delete(e.id);
    } else return;
    if (current > peak) {
      peak = current;
      at = i;
    }
  });
  return at;
}
