/** What `-` reads: a stream of bytes, and whether it is a terminal (which `-` refuses). */
export type CliStdin = NodeJS.ReadableStream & { readonly isTTY?: boolean };

/** Where a command writes, and what it returns; one per run of the command line. */
export interface CliContext {
  /** Writes to standard output (reports, `--json` documents, files written to `-`). */
  readonly out: (text: string) => void;
  /** Writes to standard error (notes beside the result). */
  readonly err: (text: string) => void;
  /**
   * Writes binary output given `-o -` (a pickle) to standard output; returns false, writing nothing, when standard
   * output is a terminal.
   */
  readonly outBytes: (bytes: Uint8Array) => boolean;
  /** What an input of `-` reads. */
  readonly stdin: CliStdin;
  /** The exit code a command sets when it is not 0 (a child's, for demo and bench). */
  exitCode: number;
}
