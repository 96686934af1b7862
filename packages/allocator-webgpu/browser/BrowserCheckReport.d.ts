/**
 * What `runStowageBrowserChecks()` (browser/entry.ts) resolves to in the page. Plain JSON: it crosses from the
 * page to the Node test through Playwright's `page.evaluate`. A declaration file, so that both the bundle's
 * entry and the Node test (whose rootDir is test/) can import it as a type.
 */
export interface BrowserCheckReport {
  /** `navigator.userAgent` of the page. */
  readonly userAgent: string;
  /** Why no check ran: `navigator.gpu` is missing, or it yielded no adapter. Absent when the checks ran. */
  readonly unavailable?: string;
  /** `GPUAdapter.info` of the adapter `navigator.gpu.requestAdapter()` returned; null when there was none. */
  readonly adapter: BrowserAdapterInfo | null;
  /** `WebGpuContext.adapterInfo` of the device `openWebGpuDevice()` opened. */
  readonly deviceInfo?: string;
  /** One entry per check of core's `allocatorContract`, in order; every check runs even after a failure. */
  readonly contract: readonly ContractCheckResult[];
  /** The write/read round trip through a runtime with the `webgpu` plugin; absent when no check ran. */
  readonly roundTrip?: RoundTripResult;
  /** Milliseconds from the call to the report. */
  readonly elapsedMs: number;
}

/** The fields of `GPUAdapterInfo` a reader needs to know which implementation ran the checks. */
export interface BrowserAdapterInfo {
  readonly vendor: string;
  readonly architecture: string;
  readonly device: string;
  readonly description: string;
  /** `GPUAdapterInfo.isFallbackAdapter` (software adapters such as SwiftShader); undefined where not exposed. */
  readonly isFallbackAdapter?: boolean;
  /** `GPUAdapter.limits.maxBufferSize`, in bytes. */
  readonly maxBufferSize: number;
}

export interface ContractCheckResult {
  /** The check's behaviour sentence. */
  readonly name: string;
  readonly ok: boolean;
  /** The failure's `name: message` (first lines of its stack); absent when `ok`. */
  readonly error?: string;
  /** Milliseconds the check took. */
  readonly elapsedMs: number;
}

export interface RoundTripResult {
  /** True when every step read back exactly the bytes written. */
  readonly ok: boolean;
  /** One line per step: what was written and whether it came back. */
  readonly steps: readonly string[];
  /** The error that ended the round trip early, as `name: message`. */
  readonly error?: string;
}
