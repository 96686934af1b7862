import type { MemorySnapshot } from '@stowage/core';
import type { SnapshotBlock, SnapshotFrame } from '@stowage/core/plugin-kit';
import { formatBytes } from '@stowage/core';

/** One weighted stack of a flame graph: the names from the root outwards, and the bytes it stands for. */
export interface FlameStack {
  readonly path: readonly string[];
  readonly bytes: number;
}

/** The name of a block's state in a flame graph (and the colour it gets). */
const STATE_NAMES = { active_allocated: 'allocated', active_pending_free: 'pending free', inactive: 'free' } as const;
const ROUNDING = '<rounding>';
const NO_FRAMES = '<no frames>';

/**
 * The blocks of `snapshot`'s segments as flame-graph stacks, as PyTorch's `_memory_viz segments` and `memory` lay
 * them out: `stream N`, then (with `bySegment`) the segment, then the block's state, then its frames outermost
 * first. An allocated block weighs its requested bytes, and the rest of its size sits under `<rounding>`; a free
 * or pending block weighs its size. So the stacks sum to the reserved bytes.
 * @param prefix names put before every stack (`only before`, for `compare`)
 */
export function segmentStacks(
  snapshot: Pick<MemorySnapshot, 'segments'>,
  options: { readonly bySegment: boolean; readonly device?: number | undefined; readonly prefix?: readonly string[] },
): FlameStack[] {
  const stacks: FlameStack[] = [];
  for (const segment of snapshot.segments) {
    if (options.device !== undefined && segment.device !== options.device) continue;
    const head = [...(options.prefix ?? []), `stream ${segment.stream}`, ...(options.bySegment ? [segmentName(segment.address, segment.total_size)] : [])];
    for (const block of segment.blocks) stacks.push(...blockStacks(head, block));
  }
  return stacks;
}

/** How a segment is named in flame graphs and comparisons: its address and size. */
export function segmentName(address: number, totalBytes: number): string {
  return `segment 0x${address.toString(16)} (${formatBytes(totalBytes)})`;
}

function blockStacks(head: readonly string[], block: SnapshotBlock): FlameStack[] {
  const state = STATE_NAMES[block.state];
  if (block.state === 'inactive') return [{ path: [...head, state], bytes: block.size }];
  const frames = block.frames.length === 0 ? [NO_FRAMES] : [...block.frames].reverse().map(formatFrame);
  if (block.state === 'active_pending_free') return [{ path: [...head, state, ...frames], bytes: block.size }];
  const stacks: FlameStack[] = [{ path: [...head, state, ...frames], bytes: block.requested_size }];
  if (block.size > block.requested_size) stacks.push({ path: [...head, state, ROUNDING], bytes: block.size - block.requested_size });
  return stacks;
}

/** `file.py:12:name`, the file without its directories. */
function formatFrame(frame: SnapshotFrame): string {
  return `${frame.filename.split(/[\\/]/).pop() ?? frame.filename}:${frame.line}:${frame.name}`;
}

/** A node of the merged stacks. Invariant: `bytes == sum(children.bytes) + own bytes` (own: stacks ending here). */
interface FlameNode {
  readonly name: string;
  bytes: number;
  readonly children: Map<string, FlameNode>;
}

const WIDTH = 1200;
const ROW = 18;
const PAD = 10;
const TOP = 44;
/** Width of one character of the labels (12 px monospace), for cutting labels to their box. */
const CHAR_PX = 7.3;
/** Boxes narrower than this are not drawn (their bytes show in their parent's). */
const MIN_PX = 0.3;

/**
 * `stacks` as one SVG flame graph (as Brendan Gregg's flamegraph.pl draws them: the root at the bottom, each stack's
 * names upwards, widths proportional to bytes, siblings in name order). Every box carries a `<title>` (hover: its
 * stack and bytes) and `data-name`, `data-bytes`, `data-depth`; the SVG loads nothing.
 * @param title the heading; `subtitle` a line under it
 */
export function toFlameGraphSvg(stacks: readonly FlameStack[], options: { readonly title: string; readonly subtitle?: string }): string {
  const root: FlameNode = { name: 'all', bytes: 0, children: new Map() };
  let depth = 0;
  for (const stack of stacks) {
    if (stack.bytes <= 0) continue;
    root.bytes += stack.bytes;
    let node = root;
    for (const name of stack.path) {
      let child = node.children.get(name);
      if (child === undefined) node.children.set(name, (child = { name, bytes: 0, children: new Map() }));
      child.bytes += stack.bytes;
      node = child;
    }
    depth = Math.max(depth, stack.path.length);
  }
  const height = TOP + (depth + 1) * ROW + PAD + 20;
  const scale = root.bytes > 0 ? (WIDTH - 2 * PAD) / root.bytes : 0;
  const boxes: string[] = [];
  const draw = (node: FlameNode, x: number, level: number, trail: readonly string[]): void => {
    const w = node.bytes * scale;
    if (w < MIN_PX) return;
    const y = height - PAD - 20 - (level + 1) * ROW;
    const path = [...trail, node.name];
    const share = root.bytes > 0 ? ((node.bytes / root.bytes) * 100).toFixed(2) : '0';
    const fits = Math.floor((w - 6) / CHAR_PX);
    const label = fits < 3 ? '' : node.name.length <= fits ? node.name : `${node.name.slice(0, fits - 2)}..`;
    boxes.push(
      `<g data-name="${escapeXml(node.name)}" data-bytes="${node.bytes}" data-depth="${level}"><title>${escapeXml(path.join(' ; '))}\n${formatBytes(node.bytes)} (${share} %)</title>` +
        `<rect x="${x.toFixed(2)}" y="${y}" width="${w.toFixed(2)}" height="${ROW - 1}" rx="2" fill="${colourOf(node.name, level)}"/>` +
        (label === '' ? '' : `<text x="${(x + 3).toFixed(2)}" y="${y + ROW - 5}">${escapeXml(label)}</text>`) +
        '</g>',
    );
    let childX = x;
    for (const child of [...node.children.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      draw(child, childX, level + 1, path);
      childX += child.bytes * scale;
    }
  };
  draw(root, PAD, 0, []);
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" data-total-bytes="${root.bytes}">`,
    '<style>text{font:12px monospace;fill:#000;pointer-events:none}g:hover rect{stroke:#000;stroke-width:0.8}.h{font:17px sans-serif}.s{font:12px sans-serif;fill:#444}</style>',
    `<rect width="100%" height="100%" fill="#fdfdf6"/>`,
    `<text class="h" x="${WIDTH / 2}" y="22" text-anchor="middle">${escapeXml(options.title)}</text>`,
    `<text class="s" x="${WIDTH / 2}" y="38" text-anchor="middle">${escapeXml(options.subtitle ?? `${formatBytes(root.bytes)} in all; hover a box for its stack and bytes`)}</text>`,
    ...(boxes.length === 0 ? [`<text class="s" x="${WIDTH / 2}" y="${TOP + ROW}" text-anchor="middle">Nothing to draw: no bytes.</text>`] : boxes),
    `<text class="s" x="${PAD}" y="${height - 8}">Widths are bytes. allocated: requested bytes by allocation stack (rounding apart); free: cached blocks; pending free: freed, waiting on a stream.</text>`,
    '</svg>',
    '',
  ].join('\n');
}

/** Block states in the colours of the memory page; other names in warm colours picked by their name. */
function colourOf(name: string, level: number): string {
  if (level === 0) return '#d9d9d9';
  if (name === 'allocated') return '#e8744f';
  if (name === 'free') return '#b8c7d9';
  if (name === 'pending free') return '#f2c14e';
  if (name === ROUNDING) return '#f4d6c6';
  let hash = 0;
  for (let i = 0; i < name.length; i++) hash = (hash * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${(hash % 50) + 5}, ${70 + (hash % 20)}%, ${58 + ((hash >> 8) % 14)}%)`;
}

function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
