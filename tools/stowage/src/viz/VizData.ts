/**
 * What the visualizer page embeds: one device's segments at the end of the snapshot and its trace, column by
 * column, with frames interned (a snapshot's entries repeat a few stacks many times).
 */
export interface VizData {
  readonly title: string;
  /** Where the snapshot came from (a file name), shown on the page. */
  readonly source: string;
  readonly device: number;
  /** The segments when the snapshot was taken, by address. */
  readonly segments: readonly VizSegment[];
  readonly trace: VizTrace;
  /** Each distinct stack, its frames one per line (`name at file:line`); '' for none. */
  readonly frameTable: readonly string[];
}

/** A block's state as the page draws it. `reclaimed`: freed by an LMS page-out and not yet reused. */
export type VizBlockState = 'allocated' | 'pending-free' | 'cached' | 'reclaimed';

export interface VizSegment {
  readonly address: number;
  readonly size: number;
  readonly stream: number;
  readonly expandable: boolean;
  /** `small` or `large` (PyTorch's pools). */
  readonly pool: string;
  readonly blocks: readonly VizBlock[];
}

export interface VizBlock {
  readonly address: number;
  readonly size: number;
  readonly requested: number;
  readonly state: Exclude<VizBlockState, 'reclaimed'>;
  /** Index into `frameTable`. */
  readonly frames: number;
}

/** The trace's entries, one array element per entry in every column. */
export interface VizTrace {
  /** Index into `actionNames`. */
  readonly action: readonly number[];
  /** The actions that occur: trace actions, and `page_out`, `page_in`, `ipc_limbo`… where the trace has them. */
  readonly actionNames: readonly string[];
  readonly addr: readonly number[];
  readonly size: readonly number[];
  readonly stream: readonly number[];
  /** Index into `frameTable`. */
  readonly frames: readonly number[];
  /** Microseconds since the first entry, or null when some entry carries no time. */
  readonly timeUs: readonly number[] | null;
}
