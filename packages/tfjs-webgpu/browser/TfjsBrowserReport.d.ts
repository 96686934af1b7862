/**
 * What `runStowageTfjsBrowserChecks()` (browser/entry.ts) resolves to in the page: plain JSON, crossing from the
 * page to the Node test through Playwright. A declaration file, so that the bundle's entry and the Node test (whose
 * rootDir is test/) can both import it as a type.
 */
export interface TfjsBrowserReport {
  readonly userAgent: string;
  /** Why nothing ran: no `navigator.gpu`, or no adapter. Absent when the models ran. */
  readonly unavailable?: string;
  readonly adapter: string | null;
  /** One entry per model of @stowage/lab/tfjs (tools/lab/src/tfjs/models.ts), stock tfjs against the Stowage backend on one device. */
  readonly models: readonly TfjsBrowserModelResult[];
  /**
   * `dataSync()` of tensors the Stowage backend holds in ranges of a segment (a matMul's output and its two
   * inputs): whether it gives `data()`'s values, the largest of their offsets in their segments, or what it threw.
   */
  readonly dataSync: { readonly sameAsData: boolean; readonly offset?: number; readonly error?: string };
  /** The mlp under LMS at 0.7 of stock's peak GPU bytes (Note [LMS inside a synchronous step]); absent when nothing ran. */
  readonly lms?: TfjsBrowserLmsResult;
  readonly elapsedMs: number;
}

export interface TfjsBrowserLmsResult {
  readonly name: string;
  /** Stock tfjs's peak GPU bytes on the device while the model ran. */
  readonly stockPeakGpuBytes: number;
  /** The webgpu plugin's `limit`: 0.7 of that peak. */
  readonly budgetBytes: number;
  /** Prediction, losses and weights bit-identical to stock's. */
  readonly same: boolean;
  readonly reservedPeakBytes: number;
  readonly pageIns: number;
  /** What failed, when the model did not run. */
  readonly error?: string;
}

export interface TfjsBrowserModelResult {
  readonly name: string;
  readonly samePrediction: boolean;
  readonly sameLosses: boolean;
  readonly sameWeights: boolean;
  /** The Stowage run's losses (a dropped dispatch shows as zeros). */
  readonly losses: readonly number[];
  /** The first validation error on the device during the Stowage run, or null. */
  readonly validationError: string | null;
  /** What failed, when the model did not run. */
  readonly error?: string;
}
