import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotFrame } from '@stowage/core/plugin-kit';
import type { AllocatorEventRecord } from '../toChromeTrace.js';
import { drawMemoryPage } from './drawMemoryPage.js';
import type { VizBlock, VizData } from './VizData.js';

/** What `buildVizPage` draws. */
export interface VizPageOptions {
  /** The page's title. */
  readonly title?: string;
  /** Where the snapshot came from, shown under the title. */
  readonly source?: string;
  /** Which device's segments and trace. Default 0. */
  readonly device?: number;
  /**
   * The trace to draw instead of the snapshot's `device_traces[device]`: what a `MemoryEventRecorder` recorded,
   * with LMS and IPC events among the allocator's. It must end where the snapshot was taken.
   */
  readonly trace?: readonly AllocatorEventRecord[];
  /**
   * Whether the entries' times are the program's own, for the time axis. Default true; false for the snapshot of
   * a replay, whose entries carry the replay's clock (the page then shows entries only).
   */
  readonly timed?: boolean;
}

const STATES: Record<string, VizBlock['state']> = { active_allocated: 'allocated', active_pending_free: 'pending-free', inactive: 'cached' };

/**
 * The visualizer page of `snapshot`: one self-contained HTML document (styles, script and data inline; it loads
 * nothing), drawn by {@link drawMemoryPage}.
 */
export function buildVizPage(snapshot: MemorySnapshot, options: VizPageOptions = {}): string {
  const data = toVizData(snapshot, options);
  // The data goes into a <script>: escape '<' so that no string in it can close the element.
  const json = JSON.stringify(data).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>${escapeHtml(data.title)}</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 16px; color: #111827; }
h1 { font-size: 18px; margin: 0 0 4px; }
#panel { position: sticky; top: 0; z-index: 1; background: #fff; padding-bottom: 4px; border-bottom: 1px solid #e5e7eb; }
#legend span { display: inline-block; padding-left: 4px; margin-right: 12px; }
#controls { margin: 4px 0 0; display: flex; align-items: center; }
#moment { margin: 0; }
#details { position: sticky; bottom: 0; background: #f9fafb; border: 1px solid #e5e7eb; margin: 0; padding: 6px; min-height: 4em; max-height: 9em; overflow: auto; }
svg { display: block; }
svg text { font-family: ui-monospace, monospace; fill: #374151; }
</style>
</head>
<body>
<main id="root">Drawing…</main>
<script>
"use strict";
const data = ${json};
(${drawMemoryPage.toString()})(data, document.getElementById('root'));
</script>
</body>
</html>
`;
}

/** The page's data: one device's segments and trace, frames interned. */
export function toVizData(snapshot: MemorySnapshot, options: VizPageOptions = {}): VizData {
  const device = options.device ?? 0;
  const frameTable: string[] = [''];
  const frameIndex = new Map<string, number>([['', 0]]);
  const intern = (frames: readonly SnapshotFrame[]): number => {
    const text = frames.map((f) => `${f.name} at ${f.filename}:${f.line}`).join('\n');
    let index = frameIndex.get(text);
    if (index === undefined) {
      frameIndex.set(text, (index = frameTable.length));
      frameTable.push(text);
    }
    return index;
  };
  const segments = snapshot.segments
    .filter((s) => s.device === device)
    .sort((a, b) => a.address - b.address)
    .map((s) => ({
      address: s.address,
      size: s.total_size,
      stream: s.stream,
      expandable: s.is_expandable,
      pool: s.segment_type,
      blocks: s.blocks.map((b) => ({ address: b.address, size: b.size, requested: b.requested_size, state: STATES[b.state] ?? 'cached', frames: intern(b.frames) })),
    }));
  const entries: readonly { action: string; addr?: number | undefined; size: number; stream: number; frames?: readonly SnapshotFrame[]; time?: number | null | undefined }[] =
    options.trace?.map((e) => ({ ...e, time: e.timeUs })) ?? (snapshot.device_traces[device] ?? []).filter((e) => e.action !== 'snapshot').map((e) => ({ ...e, time: e.time_us }));
  const actionNames: string[] = [];
  const actionIndex = new Map<string, number>();
  const action = entries.map((e) => {
    let index = actionIndex.get(e.action);
    if (index === undefined) {
      actionIndex.set(e.action, (index = actionNames.length));
      actionNames.push(e.action);
    }
    return index;
  });
  return {
    title: options.title ?? 'Stowage memory',
    source: options.source ?? 'snapshot',
    device,
    segments,
    trace: { action, actionNames, addr: entries.map((e) => e.addr ?? 0), size: entries.map((e) => e.size), stream: entries.map((e) => e.stream), frames: entries.map((e) => intern(e.frames ?? [])), timeUs: options.timed === false ? null : relativeTimes(entries.map((e) => e.time)) },
    frameTable,
  };
}

/** Each time less the first, or null when a time is missing (a page's time axis needs them all). */
function relativeTimes(times: readonly (number | null | undefined)[]): number[] | null {
  if (!times.every((t): t is number => typeof t === 'number' && Number.isFinite(t))) return null;
  const start = times[0] ?? 0;
  return times.map((t) => t - start);
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
}
