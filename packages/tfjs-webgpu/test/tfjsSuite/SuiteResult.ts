/** What one run of tfjs-core's test suite on one backend gave. */
export interface SuiteResult {
  readonly backend: 'stock' | 'stowage';
  readonly adapter: string;
  /** Full names of the specs that passed. */
  readonly passed: string[];
  /** Specs (and suites whose hooks failed, named with a " (suite)" suffix) that failed, with their first message. */
  readonly failed: { readonly name: string; readonly message: string }[];
  /** Specs jasmine reported pending (xit, pending()). */
  pending: number;
  wallMs: number;
}
