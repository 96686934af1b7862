/**
 * Snapshots of the engine in PyTorch's memory-snapshot schema (the form PyTorch's memory visualizer reads).
 *
 * - One entry per fixed segment; for an expandable segment, one per contiguous mapped range, as PyTorch lists
 *   them: an unmapped gap in the middle ends one entry and the next mapped block starts another.
 * - Each entry's blocks tile exactly `[address, address + total_size)`, in address order, each in the state
 *   PyTorch names (active_allocated, active_pending_free, inactive).
 * - Entries are sorted by address; `device_traces[d]`, for the engine's device index d, holds the history
 *   recordHistory() asked for (the lists before it are empty), as PyTorch indexes traces by device. Taking a
 *   snapshot then records a `snapshot` entry (address 0, the active bytes), which the next snapshot lists.
 * - `allocator_settings` lists the resolved options under PyTorch's names where it has them.
 */
import type { MemorySnapshot, SnapshotBlock, SnapshotSegment, SnapshotTraceEntry } from '../contracts/MemorySnapshot.js';
import type { Block, Segment } from './Block.js';
import type { EngineState } from './EngineState.js';
import { ROUNDUP_INTERVALS } from './SizeClass.js';

/** Builds snapshots from the shared EngineState. Stateless. */
export class EngineSnapshot<H> {
  constructor(private readonly state: EngineState<H>) {}

  take(): MemorySnapshot {
    const segments: SnapshotSegment[] = [];
    for (const segment of this.state.segments) this.#snapshotSegment(segment, segments);
    segments.sort((a, b) => a.address - b.address);
    // PyTorch's viewer reads the trace of device d at device_traces[d].
    const device = this.state.backend.device.index;
    const device_traces: SnapshotTraceEntry[][] = Array.from({ length: device + 1 }, () => []);
    const history = this.state.history;
    device_traces[device] = history?.entries() ?? [];
    // As PyTorch's, a snapshot leaves a `snapshot` entry of the active bytes, after the trace it returns was read.
    history?.record('snapshot', 0, segments.reduce((n, s) => n + s.active_size, 0), this.state.backend.defaultStream);
    return { segments, device_traces, allocator_settings: this.#settings(), external_annotations: [] };
  }

  /** Adds a segment's snapshot entries to `out`: one per contiguous mapped range. */
  #snapshotSegment(segment: Segment<H>, out: SnapshotSegment[]): void {
    let run: Block<H>[] = [];
    for (let b: Block<H> | null = segment.extentBytes > 0 ? segment.head : null; b; b = b.next) {
      if (b.mapped) run.push(b);
      else if (run.length > 0) {
        out.push(this.#snapshotRange(segment, run));
        run = [];
      }
    }
    if (run.length > 0) out.push(this.#snapshotRange(segment, run));
  }

  /** The snapshot entry of a mapped range of `segment`: its blocks, adjacent, in address order. */
  #snapshotRange(segment: Segment<H>, range: readonly Block<H>[]): SnapshotSegment {
    const blocks: SnapshotBlock[] = [];
    let total = 0;
    let allocated = 0;
    let active = 0;
    let requested = 0;
    for (const b of range) {
      const state = b.allocated ? 'active_allocated' : b.eventCount > 0 ? 'active_pending_free' : 'inactive';
      total += b.size;
      if (b.allocated) allocated += b.size;
      if (state !== 'inactive') active += b.size;
      requested += b.requestedSize;
      blocks.push({ address: b.address, size: b.size, requested_size: b.requestedSize, state, frames: b.frames === null ? [] : [...b.frames] });
    }
    return {
      device: this.state.backend.device.index,
      address: range[0]!.address,
      total_size: total,
      allocated_size: allocated,
      active_size: active,
      requested_size: requested,
      stream: segment.stream,
      segment_type: segment.small ? 'small' : 'large',
      segment_pool_id: [0, 0],
      is_expandable: segment.expandable,
      frames: segment.frames === null ? [] : [...segment.frames],
      blocks,
    };
  }

  #settings(): Record<string, unknown> {
    const o = this.state.options;
    const divisions: Record<string, number> = {};
    for (let i = 0; i < ROUNDUP_INTERVALS; i++) divisions[String(2 ** i)] = o.roundupPower2Divisions[i] ?? 0;
    return {
      PYTORCH_CUDA_ALLOC_CONF: '',
      preset: o.preset,
      max_split_size: o.maxSplitSize === Number.MAX_SAFE_INTEGER ? -1 : o.maxSplitSize,
      garbage_collection_threshold: o.garbageCollectionThreshold,
      expandable_segments: o.expandableSegments && this.state.backend.pageMapping !== undefined,
      roundup_power2_divisions: divisions,
      memory_limit: Number.isFinite(this.state.allowedBytes) ? this.state.allowedBytes : -1,
    };
  }
}
