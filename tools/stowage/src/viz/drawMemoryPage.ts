import type { VizData } from './VizData.js';

/**
 * Draws the memory page into `root`. Runs in the browser: `buildVizPage` embeds this function's source text in
 * the page, so it must stay self-contained (no imports but types, no module-level names, nothing Node has).
 *
 * - Timeline: allocated and reserved bytes after each trace entry (x: entry index), from the snapshot's final
 *   figures walked back through the trace; LMS, IPC and out-of-memory entries as vertical markers.
 * - Segment map at the slider's moment: one row per segment, scaled to its size, each block coloured by state.
 *   The last moment is the snapshot itself; an earlier one undoes the trace's entries back to it (Note
 *   [Walking back]).
 * - Hover on a block shows its address, size, requested size, state, stream and frames.
 *
 * Drawn elements carry `data-kind` (`segment`, `block`, `marker`), and blocks `data-state`, `data-address`,
 * `data-size`, so tests can count and check them; the timeline's `svg` carries `data-peak-reserved` and
 * `data-peak-allocated`.
 */
export function drawMemoryPage(data: VizData, root: HTMLElement): void {
  // Note [Walking back]: as PyTorch's viewer does, a moment before the snapshot is reached by undoing entries from
  // the end: an alloc removes its block, a free_requested makes it allocated again, a free_completed brings it
  // back as pending free, segment_alloc/segment_map remove the segment (or the mapped range), segment_free and
  // segment_unmap bring it back. LMS and IPC marks are replayed forward from the start (a page-out makes the range
  // it freed `reclaimed` until an allocation reuses it; ipc_limbo marks a block until ipc_collect or its free).
  const SVG = 'http://www.w3.org/2000/svg';
  const WIDTH = 960;
  const TIMELINE_HEIGHT = 200;
  const LABEL_WIDTH = 150;
  const ROW_HEIGHT = 14;
  const MAX_POINTS = 2000;
  const COLORS: Record<string, string> = { allocated: '#2563eb', 'pending-free': '#f59e0b', cached: '#d1d5db', reclaimed: '#a855f7' };
  const MARK_COLORS: Record<string, string> = { page_out: '#a855f7', page_in: '#16a34a', reclaim: '#7e22ce', ipc_limbo: '#dc2626', ipc_collect: '#0891b2', ipc_send: '#64748b', ipc_receive: '#64748b', oom: '#000000' };

  interface Block {
    address: number;
    size: number;
    requested: number;
    state: string;
    frames: number;
    stream: number;
    limbo: boolean;
  }
  interface Segment {
    address: number;
    size: number;
    stream: number;
    pool: string;
    blocks: Block[];
  }

  const trace = data.trace;
  const n = trace.action.length;
  const actionOf = (i: number): string => trace.actionNames[trace.action[i]!]!;
  const hasCompleted = trace.actionNames.includes('free_completed');

  function el<K extends keyof SVGElementTagNameMap>(name: K, attrs: Record<string, string | number>, parent: Element): SVGElementTagNameMap[K] {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    parent.appendChild(node);
    return node;
  }
  function html<K extends keyof HTMLElementTagNameMap>(name: K, text: string, parent: Element, attrs: Record<string, string> = {}): HTMLElementTagNameMap[K] {
    const node = document.createElement(name);
    node.textContent = text;
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    parent.appendChild(node);
    return node;
  }
  function bytes(b: number): string {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = Math.abs(b);
    let u = 0;
    while (u < units.length - 1 && v >= 1024) {
      v /= 1024;
      u++;
    }
    return `${b < 0 ? '-' : ''}${u === 0 ? v : v.toFixed(2)} ${units[u]}`;
  }
  const hex = (a: number): string => `0x${a.toString(16)}`;

  // --- Timeline ---------------------------------------------------------------------------------------------
  const finalReserved = data.segments.reduce((s, seg) => s + seg.size, 0);
  const finalAllocated = data.segments.reduce((s, seg) => s + seg.blocks.reduce((t, b) => t + (b.state === 'cached' ? 0 : b.requested), 0), 0);
  const dAllocated = new Float64Array(n);
  const dReserved = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const a = actionOf(i);
    const size = trace.size[i]!;
    if (a === 'alloc') dAllocated[i] = size;
    else if (a === (hasCompleted ? 'free_completed' : 'free_requested')) dAllocated[i] = -size;
    else if (a === 'segment_alloc' || a === 'segment_map') dReserved[i] = size;
    else if (a === 'segment_free' || a === 'segment_unmap') dReserved[i] = -size;
  }
  const allocated = new Float64Array(n + 1);
  const reserved = new Float64Array(n + 1);
  allocated[0] = finalAllocated - dAllocated.reduce((s, d) => s + d, 0);
  reserved[0] = finalReserved - dReserved.reduce((s, d) => s + d, 0);
  for (let i = 0; i < n; i++) {
    allocated[i + 1] = allocated[i]! + dAllocated[i]!;
    reserved[i + 1] = reserved[i]! + dReserved[i]!;
  }
  const peakReserved = reserved.reduce((m, v) => Math.max(m, v), 0);
  const peakAllocated = allocated.reduce((m, v) => Math.max(m, v), 0);

  root.textContent = '';
  html('h1', data.title, root);
  html('p', `${data.source} — device ${data.device}; ${data.segments.length} segments, ${n} trace entries; peak reserved ${bytes(peakReserved)}, peak allocated ${bytes(peakAllocated)}`, root, { id: 'summary' });
  const timeline = el('svg', { id: 'timeline', width: WIDTH, height: TIMELINE_HEIGHT + 20, 'data-peak-reserved': peakReserved, 'data-peak-allocated': peakAllocated, 'data-entries': n }, root);
  const yMax = Math.max(peakReserved, peakAllocated, 1);
  const x = (i: number): number => LABEL_WIDTH + (n === 0 ? 0 : (i / n) * (WIDTH - LABEL_WIDTH - 10));
  const y = (v: number): number => 10 + TIMELINE_HEIGHT - (v / yMax) * TIMELINE_HEIGHT;
  el('text', { x: 4, y: 16, 'font-size': 11 }, timeline).textContent = bytes(yMax);
  el('text', { x: 4, y: TIMELINE_HEIGHT + 10, 'font-size': 11 }, timeline).textContent = '0 B';
  el('line', { x1: LABEL_WIDTH, x2: WIDTH - 10, y1: y(0), y2: y(0), stroke: '#9ca3af' }, timeline);
  const bucket = Math.max(1, Math.ceil((n + 1) / MAX_POINTS));
  const series = (values: Float64Array, name: string, color: string, peak: number): void => {
    const points: string[] = [];
    for (let start = 0; start <= n; start += bucket) {
      let m = -Infinity;
      for (let i = start; i < Math.min(n + 1, start + bucket); i++) m = Math.max(m, values[i]!);
      points.push(`${x(start).toFixed(1)},${y(m).toFixed(1)}`);
    }
    el('polyline', { points: points.join(' '), fill: 'none', stroke: color, 'stroke-width': 1.5, 'data-series': name, 'data-peak': peak }, timeline);
  };
  series(reserved, 'reserved', '#6b7280', peakReserved);
  series(allocated, 'allocated', COLORS.allocated!, peakAllocated);
  for (let i = 0; i < n; i++) {
    const a = actionOf(i);
    const color = MARK_COLORS[a];
    if (color === undefined) continue;
    const mark = el('line', { x1: x(i + 1), x2: x(i + 1), y1: 10, y2: TIMELINE_HEIGHT + 10, stroke: color, 'stroke-opacity': 0.6, 'data-kind': 'marker', 'data-marker': a, 'data-entry': i }, timeline);
    el('title', {}, mark).textContent = `${a} at entry ${i}: ${bytes(trace.size[i]!)} at ${hex(trace.addr[i]!)}`;
  }
  const cursor = el('line', { y1: 10, y2: TIMELINE_HEIGHT + 10, stroke: '#ef4444', 'stroke-dasharray': '3 3', id: 'cursor' }, timeline);

  // --- Legend and slider ------------------------------------------------------------------------------------
  const legend = html('div', '', root, { id: 'legend' });
  for (const [state, color] of Object.entries(COLORS)) {
    const item = html('span', ` ${state} `, legend);
    item.style.borderLeft = `14px solid ${color}`;
    item.style.marginRight = '12px';
  }
  html('span', ' reserved (line) ', legend).style.borderLeft = '14px solid #6b7280';
  html('span', ' IPC limbo (red outline)', legend).style.borderLeft = '14px solid #dc2626';
  const controls = html('div', '', root, { id: 'controls' });
  const slider = html('input', '', controls, { type: 'range', id: 'moment', min: '0', max: String(n), value: String(n), step: '1' });
  slider.style.width = `${WIDTH - LABEL_WIDTH}px`;
  const momentLabel = html('span', '', controls, { id: 'moment-label' });
  const details = html('pre', 'Hover over a block for its details.', root, { id: 'details' });
  const map = el('svg', { id: 'segments', width: WIDTH, height: ROW_HEIGHT }, root);

  // --- Segment map at a moment --------------------------------------------------------------------------------
  function finalSegments(): Segment[] {
    return data.segments.map((s) => ({
      address: s.address,
      size: s.size,
      stream: s.stream,
      pool: s.pool,
      blocks: s.blocks.map((b) => ({ address: b.address, size: b.size, requested: b.requested, state: b.state, frames: b.frames, stream: s.stream, limbo: false })),
    }));
  }

  /** Segments and live blocks after the first `m` entries (Note [Walking back]). */
  function stateAt(m: number): Segment[] {
    if (m >= n) return finalSegments();
    const ranges = new Map<number, { address: number; size: number; stream: number; pool: string }>();
    const live = new Map<number, Block>();
    for (const s of data.segments) {
      ranges.set(s.address, { address: s.address, size: s.size, stream: s.stream, pool: s.pool });
      for (const b of s.blocks) if (b.state !== 'cached') live.set(b.address, { address: b.address, size: b.size, requested: b.requested, state: b.state, frames: b.frames, stream: s.stream, limbo: false });
    }
    for (let i = n - 1; i >= m; i--) {
      const a = actionOf(i);
      const addr = trace.addr[i]!;
      const size = trace.size[i]!;
      const block = (state: string): Block => ({ address: addr, size, requested: size, state, frames: trace.frames[i]!, stream: trace.stream[i]!, limbo: false });
      if (a === 'alloc') live.delete(addr);
      else if (a === 'free_requested') {
        const b = live.get(addr);
        if (b) b.state = 'allocated';
        else live.set(addr, block('allocated'));
      } else if (a === 'free_completed') {
        if (!live.has(addr)) live.set(addr, block('pending-free'));
      } else if (a === 'segment_alloc') ranges.delete(addr);
      else if (a === 'segment_free' || a === 'segment_unmap') ranges.set(addr, { address: addr, size, stream: trace.stream[i]!, pool: 'large' });
      else if (a === 'segment_map') {
        for (const r of [...ranges.values()]) {
          if (addr < r.address || addr >= r.address + r.size) continue;
          ranges.delete(r.address);
          if (addr > r.address) ranges.set(r.address, { ...r, size: addr - r.address });
          const end = addr + size;
          if (end < r.address + r.size) ranges.set(end, { ...r, address: end, size: r.address + r.size - end });
          break;
        }
      }
    }
    const sorted = [...ranges.values()].sort((p, q) => p.address - q.address);
    const blocks = [...live.values()].sort((p, q) => p.address - q.address);
    return sorted.map((r) => {
      const inside = blocks.filter((b) => b.address >= r.address && b.address < r.address + r.size);
      const all: Block[] = [];
      let at = r.address;
      for (const b of inside) {
        if (b.address > at) all.push({ address: at, size: b.address - at, requested: 0, state: 'cached', frames: 0, stream: r.stream, limbo: false });
        all.push(b);
        at = Math.max(at, b.address + b.size);
      }
      if (at < r.address + r.size) all.push({ address: at, size: r.address + r.size - at, requested: 0, state: 'cached', frames: 0, stream: r.stream, limbo: false });
      return { ...r, blocks: all };
    });
  }

  /** LMS and IPC marks after the first `m` entries: ranges freed by a page-out and not reused, addresses in limbo. */
  function marksAt(m: number): { reclaimed: { address: number; size: number }[]; limbo: Set<number> } {
    let reclaimed: { address: number; size: number }[] = [];
    const limbo = new Set<number>();
    for (let i = 0; i < m; i++) {
      const a = actionOf(i);
      const addr = trace.addr[i]!;
      const size = trace.size[i]!;
      if (a === 'page_out') reclaimed.push({ address: addr, size });
      else if (a === 'alloc') reclaimed = reclaimed.filter((r) => r.address + r.size <= addr || addr + size <= r.address);
      else if (a === 'ipc_limbo') limbo.add(addr);
      else if (a === 'ipc_collect' || a === 'free_requested') limbo.delete(addr);
    }
    return { reclaimed, limbo };
  }

  function drawAt(m: number): void {
    const segments = stateAt(m);
    const { reclaimed, limbo } = marksAt(m);
    while (map.firstChild) map.removeChild(map.firstChild);
    map.setAttribute('height', String(Math.max(1, segments.length) * ROW_HEIGHT + 4));
    map.setAttribute('data-moment', String(m));
    const width = WIDTH - LABEL_WIDTH - 10;
    segments.forEach((s, row) => {
      const top = row * ROW_HEIGHT + 2;
      el('text', { x: 2, y: top + ROW_HEIGHT - 4, 'font-size': 10 }, map).textContent = `${hex(s.address)} ${bytes(s.size)}`;
      const seg = el('rect', { x: LABEL_WIDTH, y: top, width, height: ROW_HEIGHT - 3, fill: '#f3f4f6', stroke: '#9ca3af', 'stroke-width': 0.5, 'data-kind': 'segment', 'data-address': s.address, 'data-size': s.size, 'data-stream': s.stream }, map);
      el('title', {}, seg).textContent = `segment ${hex(s.address)}: ${bytes(s.size)} (${s.pool}), stream ${s.stream}`;
      for (const b of s.blocks) {
        let state = b.state;
        if (state === 'cached' && reclaimed.some((r) => r.address < b.address + b.size && b.address < r.address + r.size)) state = 'reclaimed';
        const inLimbo = b.limbo || (state !== 'cached' && limbo.has(b.address));
        const rect = el('rect', {
          x: LABEL_WIDTH + ((b.address - s.address) / s.size) * width,
          y: top + 1,
          width: Math.max(0.5, (b.size / s.size) * width - 0.5),
          height: ROW_HEIGHT - 5,
          fill: COLORS[state] ?? '#000',
          stroke: inLimbo ? '#dc2626' : 'none',
          'stroke-width': inLimbo ? 1.5 : 0,
          'data-kind': 'block',
          'data-state': state,
          'data-address': b.address,
          'data-size': b.size,
          'data-requested': b.requested,
          'data-stream': b.stream,
          'data-limbo': String(inLimbo),
        }, map);
        const frames = data.frameTable[b.frames] ?? '';
        const text = `block ${hex(b.address)} in segment ${hex(s.address)}\nstate: ${state}${inLimbo ? ' (IPC limbo)' : ''}\nsize: ${bytes(b.size)} (${b.size} bytes)\nrequested: ${bytes(b.requested)} (${b.requested} bytes)\nstream: ${b.stream}\nframes:${frames === '' ? ' none recorded' : `\n${frames}`}`;
        el('title', {}, rect).textContent = text;
        rect.addEventListener('mouseenter', () => {
          details.textContent = text;
        });
      }
    });
    cursor.setAttribute('x1', String(x(m)));
    cursor.setAttribute('x2', String(x(m)));
    momentLabel.textContent = ` after ${m} of ${n} entries: reserved ${bytes(reserved[m] ?? 0)}, allocated ${bytes(allocated[m] ?? 0)}, ${segments.length} segments`;
  }

  slider.addEventListener('input', () => drawAt(Number(slider.value)));
  drawAt(n);
}
