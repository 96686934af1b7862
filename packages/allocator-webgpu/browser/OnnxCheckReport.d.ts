/**
 * What `runStowageOnnxChecks()` (browser/onnxEntry.ts) resolves to in the page. Plain JSON: it crosses from the
 * page to the Node test through Playwright's `page.evaluate`.
 */
export interface OnnxCheckReport {
  /** Why nothing ran: no `navigator.gpu`, no adapter, or fewer than 9 storage buffers per stage. */
  readonly unavailable?: string;
  /** One entry per model and device, in the order run. */
  readonly runs: readonly OnnxRun[];
  /** Milliseconds from the call to the report. */
  readonly elapsedMs: number;
}

export interface OnnxRun {
  /** The model: 'silero-v5', 'paddle-classifier', or 'transformers.js image-classification'. */
  readonly model: string;
  readonly device: 'plain' | 'stowage';
  /** The hex of every output's bytes, joined (ORT), or the pipeline's JSON output (transformers.js). */
  readonly output: string;
  /** The Stowage device's counters (createBuffer, subAllocated, …); absent on the plain device. */
  readonly counts?: Readonly<Record<string, number>>;
  /** The error, when the run threw. */
  readonly error?: string;
  readonly elapsedMs: number;
}

/** Which runtime a page runs (each in a page of its own: JSEP starts its device once per page). */
export type OnnxCheckPath = 'native' | 'jsep-plain' | 'jsep-stowage' | 'transformers';
