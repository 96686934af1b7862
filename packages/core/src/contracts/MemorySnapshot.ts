/**
 * A memory snapshot in PyTorch's schema (`torch.cuda.memory._snapshot()`), so that PyTorch's memory
 * visualizer can load a Stowage snapshot saved as JSON. Field names are PyTorch's, hence snake_case.
 */
export interface MemorySnapshot {
  /**
   * By address: one entry per segment, and for an expandable segment one per contiguous mapped range (as
   * PyTorch lists them), so an entry's blocks always tile `[address, address + total_size)`.
   */
  readonly segments: SnapshotSegment[];
  /** One trace per device index; empty unless history recording is on. */
  readonly device_traces: SnapshotTraceEntry[][];
  readonly allocator_settings: Readonly<Record<string, unknown>>;
  /** User annotations (PyTorch's `_record_memory_history` markers); Stowage records none. */
  readonly external_annotations: unknown[];
}

export type SnapshotBlockState = 'active_allocated' | 'active_pending_free' | 'inactive';

export interface SnapshotBlock {
  readonly address: number;
  readonly size: number;
  readonly requested_size: number;
  readonly state: SnapshotBlockState;
  readonly frames: SnapshotFrame[];
}

export interface SnapshotSegment {
  readonly device: number;
  readonly address: number;
  readonly total_size: number;
  readonly allocated_size: number;
  readonly active_size: number;
  readonly requested_size: number;
  readonly stream: number;
  readonly segment_type: 'small' | 'large';
  readonly segment_pool_id: [number, number];
  readonly is_expandable: boolean;
  readonly frames: SnapshotFrame[];
  readonly blocks: SnapshotBlock[];
}

export interface SnapshotFrame {
  readonly filename: string;
  readonly line: number;
  readonly name: string;
}

export type SnapshotAction =
  | 'alloc'
  | 'free_requested'
  | 'free_completed'
  | 'segment_alloc'
  | 'segment_free'
  | 'segment_map'
  | 'segment_unmap'
  | 'oom'
  | 'snapshot';

export interface SnapshotTraceEntry {
  readonly action: SnapshotAction;
  readonly addr: number;
  readonly size: number;
  readonly stream: number;
  /** Microseconds on a monotonic clock. */
  readonly time_us: number;
  readonly frames: SnapshotFrame[];
  /** PyTorch's torch.compile context; always 'N/A' here. */
  readonly compile_context: string;
  /** PyTorch's user metadata string; always '' here. */
  readonly user_metadata: string;
  /** For `oom`: bytes the device reported free. */
  readonly device_free?: number;
}
