/** Where a command writes, and what it returns; one per run of the command line. */
export interface CliContext {
  /** Writes to standard output (reports, `--json` documents, files written to `-`). */
  readonly out: (text: string) => void;
  /** Writes to standard error (notes beside the result). */
  readonly err: (text: string) => void;
  /** The exit code a command sets when it is not 0 (a child's, for demo and bench). */
  exitCode: number;
}
