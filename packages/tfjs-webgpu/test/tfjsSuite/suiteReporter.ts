import type { SuiteResult } from './SuiteResult.js';

/** What jasmine's reporter hooks receive of a spec or suite. */
export interface SpecResult {
  readonly fullName: string;
  readonly status: string;
  readonly failedExpectations: readonly { readonly message: string }[];
}

/**
 * A jasmine reporter that fills `result` (passed names, failures with their first message, pending count); a suite
 * whose hooks failed counts as a failure named with a " (suite)" suffix. `onFailed` sees each failed spec's message.
 * The Node runs (suiteMain.ts) and the page's (browser/suiteEntry.ts) both report through it.
 */
export function suiteReporter(result: SuiteResult, onFailed?: (message: string) => void): object {
  return {
    specDone(spec: SpecResult) {
      if (spec.status === 'passed') result.passed.push(spec.fullName);
      else if (spec.status === 'failed') {
        const message = spec.failedExpectations[0]?.message ?? '';
        result.failed.push({ name: spec.fullName, message });
        onFailed?.(message);
      } else if (spec.status === 'pending') result.pending++;
    },
    suiteDone(suite: SpecResult) {
      if (suite.status === 'failed') result.failed.push({ name: `${suite.fullName} (suite)`, message: suite.failedExpectations[0]?.message ?? '' });
    },
  };
}

/** The specs of tfjs's describeWithFlags blocks named `names`: a block named N has specs named "N webgpu {flags} …". */
export function specsOfBlocks(names: readonly string[]): (spec: { getFullName(): string }) => boolean {
  return (spec) => names.some((name) => spec.getFullName().startsWith(`${name} webgpu `));
}
