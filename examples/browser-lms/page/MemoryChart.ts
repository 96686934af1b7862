import { formatBytes } from '@stowage/core';

/** The memory of one moment of the run, in bytes, at `ms` milliseconds since the chart began. */
export interface MemorySample {
  readonly ms: number;
  /** Stowage's segments (`reserved_bytes.all.current`). */
  readonly reserved: number;
  /** Bytes of live tensors in them (`allocated_bytes.all.current`). */
  readonly allocated: number;
  /** Readback staging buffers alive: page-outs and reads in flight, and pooled ones (`staging_bytes.current`). */
  readonly staging: number;
  /** Bytes of tensors paged out to host memory and not yet paged back in. */
  readonly pagedOut: number;
  /** Every GPUBuffer alive on the device (Stowage's and tfjs's own), counted at the device. */
  readonly device: number;
}

/** Horizontal lines drawn across the plot, in bytes. */
export interface ChartLines {
  /** The webgpu plugin's `limit`. */
  readonly budgetBytes: number;
  /** What the device may hold: the budget and its allowance. */
  readonly allowedBytes: number;
  /** Stock tfjs's device peak on the same model. */
  readonly stockPeakBytes: number;
}

type Series = Exclude<keyof MemorySample, 'ms'>;

// The memory page's palette (tools/stowage's drawMemoryPage): reserved grey, allocated blue, a page-out's teal for
// the staging its copies sit in, the reclaimed purple for paged-out bytes.
const SERIES: readonly { readonly key: Series; readonly label: string; readonly color: string; readonly width: number }[] = [
  { key: 'device', label: 'device (every GPUBuffer)', color: '#111827', width: 1 },
  { key: 'reserved', label: 'reserved', color: '#6b7280', width: 2 },
  { key: 'allocated', label: 'allocated', color: '#2563eb', width: 2 },
  { key: 'staging', label: 'staging', color: '#0d9488', width: 2 },
  { key: 'pagedOut', label: 'paged out (host)', color: '#a855f7', width: 2 },
];
const LINES: readonly { readonly key: Exclude<keyof ChartLines, 'stockPeakBytes'>; readonly label: string; readonly color: string; readonly dash: string }[] = [
  { key: 'budgetBytes', label: 'budget', color: '#dc2626', dash: '6 3' },
  { key: 'allowedBytes', label: 'budget + allowance', color: '#f87171', dash: '2 3' },
];

const SVG = 'http://www.w3.org/2000/svg';
const AXIS_WIDTH = 84;
const RIGHT_PAD = 12;
const TOP_PAD = 8;
const BOTTOM_PAD = 34;
const MIB = 1024 * 1024;

/**
 * A live chart of a run's memory: each series drawn as steps over the samples (one per allocator or LMS event; a
 * column of pixels draws the least and the most of its samples, so that no peak is lost, as the memory page's
 * timeline does over trace entries), the budget and its allowance as lines across, a bytes axis, and below it the
 * samples and their times. Stock's device peak, far above, is written at the top rather than drawn to scale. `add`
 * records a sample and redraws at the next animation frame: while a prediction runs (synchronous JavaScript) the
 * chart waits, and catches up at the next await.
 *
 * The `svg` carries `data-samples` and `data-peak-<series>` (bytes) for tests; legend items carry `data-legend`.
 */
export class MemoryChart {
  readonly #samples: MemorySample[] = [];
  readonly #svg: SVGSVGElement;
  readonly #width: number;
  readonly #height: number;
  readonly #peaks: Record<Series, number> = { device: 0, reserved: 0, allocated: 0, staging: 0, pagedOut: 0 };
  #lines: ChartLines | undefined;
  #frame = 0;

  constructor(root: HTMLElement, width = 600, height = 300) {
    this.#width = width;
    this.#height = height;
    const legend = document.createElement('div');
    legend.className = 'legend';
    for (const { label, color, key } of [...SERIES, ...LINES]) {
      const item = document.createElement('span');
      item.dataset['legend'] = key;
      item.style.borderLeft = `12px solid ${color}`;
      item.textContent = label;
      legend.appendChild(item);
    }
    this.#svg = document.createElementNS(SVG, 'svg');
    this.#svg.setAttribute('width', String(width));
    this.#svg.setAttribute('height', String(height));
    root.append(legend, this.#svg);
  }

  /** The lines across the plot; drawn from the next redraw. */
  setLines(lines: ChartLines): void {
    this.#lines = lines;
    this.#schedule();
  }

  add(sample: MemorySample): void {
    this.#samples.push(sample);
    for (const { key } of SERIES) this.#peaks[key] = Math.max(this.#peaks[key], sample[key]);
    this.#schedule();
  }

  get samples(): number {
    return this.#samples.length;
  }

  /** Draws now (the page calls it at the end, so that a screenshot sees every sample). */
  draw(): void {
    cancelAnimationFrame(this.#frame);
    this.#frame = 0;
    const svg = this.#svg;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const samples = this.#samples;
    const plotWidth = this.#width - AXIS_WIDTH - RIGHT_PAD;
    const plotHeight = this.#height - TOP_PAD - BOTTOM_PAD;
    const lines = this.#lines;
    const topBytes = Math.max(1, ...Object.values(this.#peaks), ...(lines ? [lines.allowedBytes] : [])) * 1.15;
    const last = Math.max(1, samples.length - 1);
    const x = (index: number): number => AXIS_WIDTH + (index / last) * plotWidth;
    const y = (bytes: number): number => TOP_PAD + plotHeight - (bytes / topBytes) * plotHeight;
    svg.dataset['samples'] = String(samples.length);
    for (const { key } of SERIES) svg.dataset[`peak${key[0]!.toUpperCase()}${key.slice(1)}`] = String(this.#peaks[key]);

    const el = (name: string, attrs: Record<string, string | number>, text?: string): SVGElement => {
      const node = document.createElementNS(SVG, name);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
      if (text !== undefined) node.textContent = text;
      svg.appendChild(node);
      return node;
    };
    // Axes: bytes on the left, milliseconds below.
    const byteStep = niceStep(topBytes / MIB, 5) * MIB; // whole MiB, halves… so that labels read plainly
    for (let b = 0; b <= topBytes; b += byteStep) {
      el('line', { x1: AXIS_WIDTH, x2: AXIS_WIDTH + plotWidth, y1: y(b), y2: y(b), stroke: '#e5e7eb' });
      el('text', { x: AXIS_WIDTH - 6, y: y(b) + 4, 'text-anchor': 'end', 'font-size': 11 }, formatBytes(b));
    }
    el('text', { x: AXIS_WIDTH - 22, y: TOP_PAD + plotHeight + 16, 'text-anchor': 'end', 'font-size': 11 }, 'sample');
    el('text', { x: AXIS_WIDTH - 22, y: TOP_PAD + plotHeight + 30, 'text-anchor': 'end', 'font-size': 11 }, 'time');
    const indexStep = niceStep(last, 6);
    for (let i = 0; i <= last; i += indexStep) {
      el('line', { x1: x(i), x2: x(i), y1: TOP_PAD + plotHeight, y2: TOP_PAD + plotHeight + 4, stroke: '#6b7280' });
      el('text', { x: x(i), y: TOP_PAD + plotHeight + 16, 'text-anchor': 'middle', 'font-size': 11 }, String(i));
      const ms = samples[i]?.ms ?? 0;
      el('text', { x: x(i), y: TOP_PAD + plotHeight + 30, 'text-anchor': 'middle', 'font-size': 11 }, `${(ms / 1000).toFixed(1)} s`);
    }
    el('line', { x1: AXIS_WIDTH, x2: AXIS_WIDTH + plotWidth, y1: TOP_PAD + plotHeight, y2: TOP_PAD + plotHeight, stroke: '#6b7280' });
    if (lines !== undefined) {
      for (const { key, color, dash } of LINES) {
        el('line', { x1: AXIS_WIDTH, x2: AXIS_WIDTH + plotWidth, y1: y(lines[key]), y2: y(lines[key]), stroke: color, 'stroke-dasharray': dash, 'data-line': key });
      }
      const times = (lines.stockPeakBytes / lines.budgetBytes).toFixed(1);
      el('text', { x: AXIS_WIDTH + plotWidth, y: TOP_PAD + 10, 'text-anchor': 'end', 'font-size': 11, 'data-line': 'stockPeakBytes' }, `stock's device peak: ${formatBytes(lines.stockPeakBytes)} (${times}× the budget)`);
    }
    if (samples.length === 0) return;
    for (const { key, color, width } of SERIES) {
      el('path', { d: stepPath(samples, key, x, y), fill: 'none', stroke: color, 'stroke-width': width, 'data-series': key });
    }
  }

  #schedule(): void {
    if (this.#frame === 0) this.#frame = requestAnimationFrame(() => this.draw());
  }
}

/**
 * The SVG path of one series as steps: each sample holds until the next; where several samples share a column of
 * pixels, the path visits their least and most values there.
 */
function stepPath(samples: readonly MemorySample[], key: Series, x: (index: number) => number, y: (bytes: number) => number): string {
  const parts: string[] = [];
  let column = Number.NaN;
  let low = 0;
  let high = 0;
  let last = 0;
  const flush = (): void => {
    if (Number.isNaN(column)) return;
    parts.push(`V${y(low).toFixed(1)}V${y(high).toFixed(1)}V${y(last).toFixed(1)}`);
  };
  for (const [index, sample] of samples.entries()) {
    const px = Math.round(x(index));
    const value = sample[key];
    if (px !== column) {
      flush();
      parts.push(parts.length === 0 ? `M${px},${y(value).toFixed(1)}` : `H${px}`);
      column = px;
      low = high = value;
    } else {
      low = Math.min(low, value);
      high = Math.max(high, value);
    }
    last = value;
  }
  flush();
  return parts.join('');
}

/** The step of about `count` ticks over `range`: 1, 2 or 5 times a power of ten. */
function niceStep(range: number, count: number): number {
  const raw = range / Math.max(1, count);
  if (!(raw > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((f) => f * power).find((s) => s >= raw) ?? 10 * power;
}
