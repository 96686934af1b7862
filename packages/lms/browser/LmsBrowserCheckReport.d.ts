/**
 * What `runStowageLmsBrowserChecks()` (browser/entry.ts) resolves to in the page. Plain JSON: it crosses from the
 * page to the Node test through Playwright's `page.evaluate`. A declaration file, so that both the bundle's entry
 * and the Node test (whose rootDir is test/) can import it as a type.
 */
export interface LmsBrowserCheckReport {
  /** `navigator.userAgent` of the page. */
  readonly userAgent: string;
  /** Why no check ran: `navigator.gpu` is missing, or it yielded no adapter. Absent when the checks ran. */
  readonly unavailable?: string;
  /** The adapter as `vendor architecture (fallback: …)`; null when there was none. */
  readonly adapter: string | null;
  /** The WebGPU allocator's `limit` in every check's runtime, in bytes. */
  readonly budgetBytes: number;
  /** One entry per check, in the order of {@link LmsCheckId}; every check runs even after a failure. */
  readonly checks: readonly LmsCheckResult[];
  /** Milliseconds from the call to the report. */
  readonly elapsedMs: number;
}

/**
 * - `round-trip`: storages made under the budget get reclaimed, and each comes back with every byte through
 *   `await pinAsync(...)` and `rt.read`.
 * - `pin-pending`: a synchronous `pin()` of a storage whose page-out is in flight throws PageInPendingError (code
 *   'PAGE_IN_PENDING') and leaves it reclaimed; `await pinAsync(...)` then brings it back whole.
 * - `budget`: reserved bytes, sampled after every step of a mixed workload and as the peak, never exceed the budget.
 * - `statistics`: `memoryStats()` has every LMS key, with page_out and page_in counts above 0.
 * - `speculation`: a loop that writes six storages of which four fit, under `lms({ policy: 'speculative',
 *   speculation: true })` with `endIteration()` after each iteration: from the fourth iteration, reclaims find
 *   speculative page-outs (recall noted: mapAsync timing varies), every prefetched storage is pinned, and every
 *   byte written is read back.
 */
export type LmsCheckId = 'round-trip' | 'pin-pending' | 'budget' | 'statistics' | 'speculation';

export interface LmsCheckResult {
  readonly id: LmsCheckId;
  /** True when every condition of the check held. */
  readonly ok: boolean;
  /** What the check saw, one line per condition or measurement; failed conditions start with 'FAILED'. */
  readonly details: readonly string[];
  /** The error that ended the check early, as `name: message` (and its cause's). */
  readonly error?: string;
  /** Milliseconds the check took. */
  readonly elapsedMs: number;
}
