import type { VizData } from './VizData.js';

/**
 * Draws the memory page into `root`. Runs in the browser: `buildVizPage` embeds this function's source text in
 * the page, so it must stay self-contained (no imports but types, no module-level names, nothing Node has).
 *
 * - The page takes the width of `root` (the window's, less the body's margin) and draws again when it changes.
 * - Timeline: allocated and reserved bytes after each trace entry (x: entry index), from the snapshot's final
 *   figures walked back through the trace, drawn as steps, with a bytes axis and an entries axis (and a time axis
 *   when every entry has a time). Each column of pixels draws the least and the most of its entries, so no peak or
 *   dip is lost.
 * - LMS, IPC and out-of-memory entries go in lanes of their own under the plot, one lane per action (Note [Mark
 *   lanes]); each lane is in the legend with its colour.
 * - The panel holding the timeline, legend and slider sticks to the top of the window, and the details box to its
 *   bottom, so that both stay in view however far the segment map is scrolled.
 * - Segment map at the slider's moment: one row per segment, its width in proportion to its bytes (the largest
 *   segment the trace ever holds spans the row; none is narrower than 2 px), each block coloured by state (a live
 *   block at least 1 px wide, drawn over free ones), the segment's address and size right-aligned beside its row.
 *   The last moment is the snapshot itself; an earlier one undoes the trace's entries back to it (Note [Walking
 *   back]).
 * - Hover on a block or a mark shows its details; a click on a mark or on the plot moves the slider there.
 * - Ctrl and the wheel zoom the map's bars about the pointer (shift and the wheel pan, a double click resets), so
 *   that a block far narrower than a pixel at full view can be seen and hovered, as in PyTorch's viewer.
 *
 * Drawn elements carry `data-kind` (`segment`, `segment-label`, `block`, `marker`, `lane`, `tick`), blocks
 * `data-state`, `data-address`, `data-size`, and marks `data-marker`, `data-count`, `data-first-entry`,
 * `data-last-entry`, so tests can count and check them; the axes are `g[data-axis=bytes|entries|time]`; the
 * timeline's `svg` carries `data-peak-reserved` and `data-peak-allocated`; legend items carry `data-legend` and
 * `data-color`.
 */
export function drawMemoryPage(data: VizData, root: HTMLElement): void {
  // Note [Walking back]: as PyTorch's viewer does, a moment before the snapshot is reached by undoing entries from
  // the end: an alloc removes its block, a free_requested makes it allocated again, a free_completed brings it
  // back as pending free, segment_alloc/segment_map remove the segment (or the mapped range), segment_free and
  // segment_unmap bring it back. LMS and IPC marks are replayed forward from the start (a page-out makes the range
  // it freed `reclaimed` until an allocation reuses it; ipc_limbo marks a block until ipc_collect or its free).
  //
  // Note [Mark lanes]: a run under LMS pages out and in thousands of times (4,621 marks in `stowage demo
  // --record`); drawn across the plot they hid it and the cursor. Each action gets a lane under the plot instead,
  // and marks closer than MARK_WIDTH px in one lane merge into one run (its count, entries and bytes on hover), so
  // every drawn mark is at least MARK_WIDTH px wide and can be hovered.
  const SVG = 'http://www.w3.org/2000/svg';
  const AXIS_WIDTH = 84; // px left of the plot: byte labels, lane and axis names
  const RIGHT_PAD = 12;
  const TOP_PAD = 8;
  const LANE_HEIGHT = 14;
  const ROW_HEIGHT = 14;
  const MIN_ROW_WIDTH = 2;
  const MARK_WIDTH = 3;
  const COLORS: Record<string, string> = { allocated: '#2563eb', 'pending-free': '#f59e0b', cached: '#d1d5db', reclaimed: '#a855f7' };
  const RESERVED_COLOR = '#6b7280';
  const LIMBO_COLOR = '#dc2626';
  const MARK_COLORS: Record<string, string> = {
    page_out: '#0d9488',
    page_in: '#65a30d',
    reclaim: '#db2777',
    ipc_send: '#64748b',
    ipc_receive: '#94a3b8',
    ipc_limbo: LIMBO_COLOR,
    ipc_collect: '#0284c7',
    oom: '#111827',
  };

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
  const times = trace.timeUs;

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
  function clear(node: Element): void {
    while (node.firstChild) node.removeChild(node.firstChild);
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
  /** The step of about `count` ticks over `range`: 1, 2 or 5 times a power of ten. */
  function niceStep(range: number, count: number): number {
    const raw = range / Math.max(1, count);
    if (!(raw > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 5, 10].map((f) => f * power).find((s) => s >= raw) ?? 10 * power;
  }
  /** µs as the unit that suits `span` µs. */
  function timeUnit(span: number): [number, string] {
    return span >= 1e6 ? [1e6, 's'] : span >= 1e3 ? [1e3, 'ms'] : [1, 'µs'];
  }
  function formatIn(v: number, unit: number, name: string): string {
    const scaled = v / unit;
    return `${+scaled.toFixed(Math.abs(scaled) >= 100 ? 0 : Math.abs(scaled) >= 10 ? 1 : 2)} ${name}`;
  }
  /** The time of moment `m` (after `m` entries): that of its last entry. */
  const timeAt = (m: number): number => (times === null || m === 0 ? 0 : times[Math.min(m, n) - 1]!);
  const [tUnit, tName] = timeUnit(timeAt(n));

  // --- Series ----------------------------------------------------------------------------------------------
  const finalReserved = data.segments.reduce((s, seg) => s + seg.size, 0);
  const finalAllocated = data.segments.reduce((s, seg) => s + seg.blocks.reduce((t, b) => t + (b.state === 'cached' ? 0 : b.requested), 0), 0);
  const dAllocated = new Float64Array(n);
  const dReserved = new Float64Array(n);
  let largestSegment = data.segments.reduce((m, s) => Math.max(m, s.size), 1);
  for (let i = 0; i < n; i++) {
    const a = actionOf(i);
    const size = trace.size[i]!;
    if (a === 'alloc') dAllocated[i] = size;
    else if (a === (hasCompleted ? 'free_completed' : 'free_requested')) dAllocated[i] = -size;
    else if (a === 'segment_alloc' || a === 'segment_map') dReserved[i] = size;
    else if (a === 'segment_free' || a === 'segment_unmap') dReserved[i] = -size;
    if (a === 'segment_alloc' || a === 'segment_free') largestSegment = Math.max(largestSegment, size);
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
  const yMax = Math.max(peakReserved, peakAllocated, 1);
  const markKinds = Object.keys(MARK_COLORS).filter((k) => trace.actionNames.includes(k));

  // --- Page skeleton -------------------------------------------------------------------------------------------
  root.textContent = '';
  html('h1', data.title, root);
  html('p', `${data.source} — device ${data.device}; ${data.segments.length} segments, ${n} trace entries; peak reserved ${bytes(peakReserved)}, peak allocated ${bytes(peakAllocated)}`, root, { id: 'summary' });
  const panel = html('div', '', root, { id: 'panel' });
  const timeline = el('svg', { id: 'timeline', 'data-peak-reserved': peakReserved, 'data-peak-allocated': peakAllocated, 'data-entries': n }, panel);
  const legend = html('div', '', panel, { id: 'legend' });
  const legendItem = (name: string, label: string, color: string): void => {
    const item = html('span', ` ${label}`, legend, { 'data-legend': name, 'data-color': color });
    item.style.borderLeft = `14px solid ${color}`;
  };
  for (const [state, color] of Object.entries(COLORS)) legendItem(state, state, color);
  legendItem('reserved', 'reserved (line)', RESERVED_COLOR);
  legendItem('limbo', 'IPC limbo (red outline)', LIMBO_COLOR);
  for (const kind of markKinds) legendItem(kind, `${kind} (lane)`, MARK_COLORS[kind]!);
  const controls = html('div', '', panel, { id: 'controls' });
  const slider = html('input', '', controls, { type: 'range', id: 'moment', min: '0', max: String(n), value: String(n), step: '1', 'aria-label': 'moment (entries applied)' });
  const momentLabel = html('div', '', panel, { id: 'moment-label' });
  const map = el('svg', { id: 'segments', height: ROW_HEIGHT }, root);
  const details = html('pre', 'Hover over a block or a mark for its details; click a mark or the plot to move there.', root, { id: 'details' });

  let width = 0;
  let plotWidth = 0;
  let x = (_i: number): number => AXIS_WIDTH;
  let cursor: SVGLineElement | undefined;
  let zoom = 1; // Note [Map zoom]
  let pan = 0;
  let bars = { left: 0, space: 1 };
  const moveTo = (m: number): void => {
    slider.value = String(Math.max(0, Math.min(n, Math.round(m))));
    drawAt(Number(slider.value));
  };

  // --- Timeline: plot, axes, mark lanes --------------------------------------------------------------------------
  function drawTimeline(): void {
    clear(timeline);
    const plotHeight = Math.round(Math.min(200, Math.max(100, window.innerHeight * 0.2)));
    const laneTop = TOP_PAD + plotHeight + 4;
    const axisTop = laneTop + markKinds.length * LANE_HEIGHT + (markKinds.length > 0 ? 2 : 0);
    const height = axisTop + (times === null ? 18 : 32);
    timeline.setAttribute('width', String(width));
    timeline.setAttribute('height', String(height));
    x = (i: number): number => AXIS_WIDTH + (n === 0 ? 0 : (i / n) * plotWidth);
    const y = (v: number): number => TOP_PAD + plotHeight - (v / yMax) * plotHeight;

    // Bytes axis: ticks at a round number of the unit that fits the peak.
    const bytesAxis = el('g', { 'data-axis': 'bytes' }, timeline);
    let unit = 1;
    while (unit * 1024 <= yMax) unit *= 1024;
    const unitName = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'][Math.round(Math.log2(unit) / 10)]!;
    const byteStep = Math.max(unit === 1 ? 1 : 0, niceStep(yMax / unit, plotHeight / 30)) * unit;
    for (let v = 0; v <= yMax; v += byteStep) {
      const tick = el('g', { 'data-kind': 'tick', 'data-value': v }, bytesAxis);
      el('line', { x1: AXIS_WIDTH - 4, x2: AXIS_WIDTH + plotWidth, y1: y(v), y2: y(v), stroke: v === 0 ? '#9ca3af' : '#f3f4f6' }, tick);
      el('text', { x: AXIS_WIDTH - 6, y: y(v) + 4, 'font-size': 11, 'text-anchor': 'end' }, tick).textContent = formatIn(v, unit, unitName);
    }
    el('line', { x1: AXIS_WIDTH, x2: AXIS_WIDTH, y1: TOP_PAD, y2: TOP_PAD + plotHeight, stroke: '#9ca3af' }, bytesAxis);

    // Series: a step line (a moment's value holds until the next entry); each pixel column draws its entries' least
    // and most, in the order they came.
    const bucket = Math.max(1, Math.ceil((n + 1) / Math.max(1, plotWidth)));
    const series = (values: Float64Array, name: string, color: string, peak: number): void => {
      const points: string[] = [];
      for (let start = 0; start <= n; start += bucket) {
        const end = Math.min(n + 1, start + bucket);
        let lo = start;
        let hi = start;
        for (let i = start; i < end; i++) {
          if (values[i]! < values[lo]!) lo = i;
          if (values[i]! > values[hi]!) hi = i;
        }
        const px = x(start).toFixed(1);
        for (const i of [start, ...(lo <= hi ? [lo, hi] : [hi, lo]), end - 1]) points.push(`${px},${y(values[i]!).toFixed(1)}`);
        points.push(`${x(Math.min(n, end)).toFixed(1)},${y(values[end - 1]!).toFixed(1)}`);
      }
      el('polyline', { points: points.join(' '), fill: 'none', stroke: color, 'stroke-width': 1.5, 'data-series': name, 'data-peak': peak }, timeline);
    };
    series(reserved, 'reserved', RESERVED_COLOR, peakReserved);
    series(allocated, 'allocated', COLORS.allocated!, peakAllocated);
    const plotArea = el('rect', { x: AXIS_WIDTH, y: TOP_PAD, width: plotWidth, height: plotHeight, fill: 'transparent', 'data-kind': 'plot' }, timeline);
    plotArea.style.cursor = 'crosshair';
    plotArea.addEventListener('click', (e) => moveTo(((e.offsetX - AXIS_WIDTH) / Math.max(1, plotWidth)) * n));

    // Mark lanes (Note [Mark lanes]).
    markKinds.forEach((kind, k) => {
      const top = laneTop + k * LANE_HEIGHT;
      el('rect', { x: AXIS_WIDTH, y: top, width: plotWidth, height: LANE_HEIGHT - 2, fill: '#f9fafb', 'data-kind': 'lane', 'data-marker': kind }, timeline);
      el('text', { x: AXIS_WIDTH - 6, y: top + LANE_HEIGHT - 4, 'font-size': 10, 'text-anchor': 'end' }, timeline).textContent = kind;
      const color = MARK_COLORS[kind]!;
      let run: { first: number; last: number; firstX: number; lastX: number; count: number; bytes: number } | undefined;
      const drawRun = (r: NonNullable<typeof run>): void => {
        const mark = el('rect', {
          x: r.firstX - MARK_WIDTH / 2,
          y: top + 1,
          width: r.lastX - r.firstX + MARK_WIDTH,
          height: LANE_HEIGHT - 4,
          fill: color,
          'data-kind': 'marker',
          'data-marker': kind,
          'data-count': r.count,
          'data-first-entry': r.first,
          'data-last-entry': r.last,
          'data-bytes': r.bytes,
        }, timeline);
        const when = times === null ? '' : r.count === 1 ? ` at ${formatIn(times[r.first]!, tUnit, tName)}` : `, ${formatIn(times[r.first]!, tUnit, tName)} to ${formatIn(times[r.last]!, tUnit, tName)}`;
        const text = r.count === 1
          ? `${kind} at entry ${r.first}${when}: ${bytes(r.bytes)} at ${hex(trace.addr[r.first]!)} (stream ${trace.stream[r.first]!})`
          : `${kind} ×${r.count}, entries ${r.first}–${r.last}${when}: ${bytes(r.bytes)} in all`;
        el('title', {}, mark).textContent = text;
        mark.style.cursor = 'pointer';
        mark.addEventListener('mouseenter', () => {
          details.textContent = `${text}\n(click to move the slider to just after entry ${r.last})`;
        });
        mark.addEventListener('click', () => moveTo(r.last + 1));
      };
      for (let i = 0; i < n; i++) {
        if (actionOf(i) !== kind) continue;
        const px = x(i + 1);
        if (run !== undefined && px - run.lastX < MARK_WIDTH) {
          run.last = i;
          run.lastX = px;
          run.count++;
          run.bytes += trace.size[i]!;
        } else {
          if (run !== undefined) drawRun(run);
          run = { first: i, last: i, firstX: px, lastX: px, count: 1, bytes: trace.size[i]! };
        }
      }
      if (run !== undefined) drawRun(run);
    });

    // Entries axis (and time axis): ticks at round entry counts.
    const entriesAxis = el('g', { 'data-axis': 'entries' }, timeline);
    const timeAxis = times === null ? undefined : el('g', { 'data-axis': 'time' }, timeline);
    el('line', { x1: AXIS_WIDTH, x2: AXIS_WIDTH + plotWidth, y1: axisTop, y2: axisTop, stroke: '#9ca3af' }, entriesAxis);
    el('text', { x: AXIS_WIDTH - 6, y: axisTop + 13, 'font-size': 11, 'text-anchor': 'end' }, entriesAxis).textContent = 'entries';
    if (timeAxis) el('text', { x: AXIS_WIDTH - 6, y: axisTop + 27, 'font-size': 11, 'text-anchor': 'end' }, timeAxis).textContent = 'time';
    const entryStep = Math.max(1, niceStep(n, plotWidth / 90));
    for (let m = 0; m <= n; m += entryStep) {
      const anchor = m === 0 ? 'start' : x(m) > AXIS_WIDTH + plotWidth - 30 ? 'end' : 'middle';
      const tick = el('g', { 'data-kind': 'tick', 'data-value': m }, entriesAxis);
      el('line', { x1: x(m), x2: x(m), y1: axisTop, y2: axisTop + 4, stroke: '#9ca3af' }, tick);
      el('text', { x: x(m), y: axisTop + 13, 'font-size': 10, 'text-anchor': anchor }, tick).textContent = String(m);
      if (timeAxis) el('text', { x: x(m), y: axisTop + 27, 'font-size': 10, 'text-anchor': anchor, 'data-kind': 'tick', 'data-value': timeAt(m) }, timeAxis).textContent = formatIn(timeAt(m), tUnit, tName);
    }
    cursor = el('line', { y1: TOP_PAD, y2: axisTop, stroke: '#ef4444', 'stroke-width': 1.5, 'stroke-dasharray': '4 2', id: 'cursor', 'pointer-events': 'none' }, timeline);

    // The slider's thumb centre runs from half a thumb in from either end: widen it by one thumb to line up with x.
    slider.style.marginLeft = `${AXIS_WIDTH - 8}px`;
    slider.style.width = `${plotWidth + 16}px`;
    momentLabel.style.marginLeft = `${AXIS_WIDTH}px`;
  }

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
    let next = 0; // both lists are by address: one sweep hands each range its blocks
    return sorted.map((r) => {
      const end = r.address + r.size;
      while (next < blocks.length && blocks[next]!.address < r.address) next++;
      const all: Block[] = [];
      let at = r.address;
      for (; next < blocks.length && blocks[next]!.address < end; next++) {
        const b = blocks[next]!;
        if (b.address > at) all.push({ address: at, size: b.address - at, requested: 0, state: 'cached', frames: 0, stream: r.stream, limbo: false });
        all.push(b);
        at = Math.max(at, b.address + b.size);
      }
      if (at < end) all.push({ address: at, size: end - at, requested: 0, state: 'cached', frames: 0, stream: r.stream, limbo: false });
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

  /** Draws the segment map at moment `m` (after `m` entries) and puts the timeline's cursor there. */
  function drawAt(m: number): void {
    const segments = stateAt(m);
    const { reclaimed, limbo } = marksAt(m);
    clear(map);
    map.setAttribute('width', String(width));
    map.setAttribute('height', String(Math.max(1, segments.length) * ROW_HEIGHT + 4));
    map.setAttribute('data-moment', String(m));
    // Labels are right-aligned against their rows: the column is as wide as the longest (the font is monospace).
    const labels = segments.map((s) => `${hex(s.address)} ${bytes(s.size)}`);
    const longest = labels.reduce((l, t) => (t.length > l.length ? t : l), '');
    const probe = el('text', { 'font-size': 10 }, map);
    probe.textContent = longest;
    const labelWidth = Math.ceil(probe.getComputedTextLength() || longest.length * 6.5);
    map.removeChild(probe);
    const barLeft = labelWidth + 10;
    const barSpace = Math.max(1, width - barLeft - RIGHT_PAD);
    const scale = segments.reduce((l, s) => Math.max(l, s.size), largestSegment);
    map.setAttribute('data-bar-left', String(barLeft));
    map.setAttribute('data-bar-space', String(barSpace));
    map.setAttribute('data-scale-bytes', String(scale));
    map.setAttribute('data-zoom', String(zoom));
    bars = { left: barLeft, space: barSpace };
    pan = Math.max(0, Math.min(pan, barSpace * (zoom - 1)));
    // Note [Map zoom]: bars are drawn at `zoom` times their width, `pan` px of that scrolled off the left, clipped to
    // the bar space; the labels stay put.
    const clip = el('clipPath', { id: 'bar-space' }, el('defs', {}, map));
    el('rect', { x: barLeft, y: 0, width: barSpace + RIGHT_PAD, height: segments.length * ROW_HEIGHT + 4 }, clip);
    const barGroup = el('g', { 'clip-path': 'url(#bar-space)' }, map);
    const bx = (px: number): number => barLeft + px * zoom - pan;
    const visible = (left: number, w: number): boolean => left + w >= barLeft && left <= barLeft + barSpace + RIGHT_PAD;
    segments.forEach((s, row) => {
      const top = row * ROW_HEIGHT + 2;
      const rowWidth = (s.size / scale) * barSpace;
      el('text', { x: barLeft - 6, y: top + ROW_HEIGHT - 4, 'font-size': 10, 'text-anchor': 'end', 'data-kind': 'segment-label', 'data-address': s.address }, map).textContent = labels[row]!;
      const seg = el('rect', { x: bx(0), y: top, width: Math.max(MIN_ROW_WIDTH, rowWidth * zoom), height: ROW_HEIGHT - 3, fill: '#f3f4f6', stroke: '#9ca3af', 'stroke-width': 0.5, 'data-kind': 'segment', 'data-address': s.address, 'data-size': s.size, 'data-stream': s.stream }, map);
      barGroup.appendChild(seg);
      el('title', {}, seg).textContent = `segment ${hex(s.address)}: ${bytes(s.size)} (${s.pool}), stream ${s.stream}`;
      // Free blocks first, live ones over them: a live block narrower than a pixel still shows, and can be hovered.
      const live = (b: Block): boolean => b.state !== 'cached';
      for (const b of [...s.blocks.filter((b) => !live(b)), ...s.blocks.filter(live)]) {
        let state = b.state;
        if (state === 'cached' && reclaimed.some((r) => r.address < b.address + b.size && b.address < r.address + r.size)) state = 'reclaimed';
        const inLimbo = b.limbo || (state !== 'cached' && limbo.has(b.address));
        const left = bx(((b.address - s.address) / s.size) * rowWidth);
        const w = Math.max(live(b) ? 1 : 0.5, (b.size / s.size) * rowWidth * zoom - 0.5);
        if (!visible(left, w)) continue;
        const rect = el('rect', {
          x: left,
          y: top + 1,
          width: w,
          height: ROW_HEIGHT - 5,
          fill: COLORS[state] ?? '#000',
          stroke: inLimbo ? LIMBO_COLOR : 'none',
          'stroke-width': inLimbo ? 1.5 : 0,
          'data-kind': 'block',
          'data-state': state,
          'data-address': b.address,
          'data-size': b.size,
          'data-requested': b.requested,
          'data-stream': b.stream,
          'data-limbo': String(inLimbo),
        }, barGroup);
        const frames = data.frameTable[b.frames] ?? '';
        const text = `block ${hex(b.address)} in segment ${hex(s.address)}\nstate: ${state}${inLimbo ? ' (IPC limbo)' : ''}\nsize: ${bytes(b.size)} (${b.size} bytes)\nrequested: ${bytes(b.requested)} (${b.requested} bytes)\nstream: ${b.stream}\nframes:${frames === '' ? ' none recorded' : `\n${frames}`}`;
        el('title', {}, rect).textContent = text;
        rect.addEventListener('mouseenter', () => {
          details.textContent = text;
        });
      }
    });
    cursor?.setAttribute('x1', String(x(m)));
    cursor?.setAttribute('x2', String(x(m)));
    const when = times === null ? '' : ` (${formatIn(timeAt(m), tUnit, tName)})`;
    momentLabel.textContent = `after ${m} of ${n} entries${when}: reserved ${bytes(reserved[m] ?? 0)}, allocated ${bytes(allocated[m] ?? 0)}, ${segments.length} segments`;
  }

  /** Lays the page out at the width of `root`: the timeline, then the map at the slider's moment. */
  function layout(): void {
    width = Math.max(480, Math.floor(root.clientWidth));
    plotWidth = width - AXIS_WIDTH - RIGHT_PAD;
    drawTimeline();
    drawAt(Number(slider.value));
  }

  slider.addEventListener('input', () => drawAt(Number(slider.value)));
  // Ctrl (or ⌘) and the wheel zoom the map's bars about the pointer, up to 2^20 times; shift and the wheel pan
  // them; a double click goes back to the whole. A plain wheel scrolls the page.
  let redraw = false;
  const redrawSoon = (): void => {
    if (redraw) return;
    redraw = true;
    requestAnimationFrame(() => {
      redraw = false;
      drawAt(Number(slider.value));
    });
  };
  map.addEventListener('wheel', (e) => {
    const px = e.clientX - map.getBoundingClientRect().left - bars.left;
    if (e.ctrlKey || e.metaKey) {
      const next = Math.min(2 ** 20, Math.max(1, zoom * (e.deltaY < 0 ? 2 : 0.5)));
      pan = ((px + pan) / zoom) * next - px;
      zoom = next;
    } else if (e.shiftKey) pan += e.deltaY + e.deltaX;
    else return;
    e.preventDefault();
    pan = Math.max(0, Math.min(pan, bars.space * (zoom - 1)));
    redrawSoon();
  }, { passive: false });
  map.addEventListener('dblclick', () => {
    zoom = 1;
    pan = 0;
    redrawSoon();
  });
  layout();
  // Draw again when the width changes (a resized window, a scroll bar that came or went), once per frame at most.
  let pending = false;
  new ResizeObserver(() => {
    if (pending || Math.floor(root.clientWidth) === width) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (Math.floor(root.clientWidth) !== width) layout();
    });
  }).observe(root);
}
