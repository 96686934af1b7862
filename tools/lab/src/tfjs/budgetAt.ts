/**
 * A budget of `fraction` of `peakBytes`, in whole 512-byte blocks (the caching engine's block size): how the LMS
 * tests, the bench and the browser check turn "a quarter of stock's peak" into a `limit`.
 */
export function budgetAt(peakBytes: number, fraction: number): number {
  return Math.round((peakBytes * fraction) / 512) * 512;
}
