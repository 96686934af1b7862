import { writeFileSync } from 'node:fs';
import type { CliContext } from './CliContext.js';

/**
 * Writes `content` to the file `path`, or to standard output when `path` is `-` or undefined (binary content
 * to a pipe only: a terminal gets a note instead).
 */
export function writeOutput(context: CliContext, path: string | undefined, content: string | Uint8Array): void {
  if (path !== undefined && path !== '-') {
    writeFileSync(path, content);
    return;
  }
  if (typeof content === 'string') context.out(content);
  else if (process.stdout.isTTY) context.err('Not writing binary output to a terminal; give -o <file>.\n');
  else process.stdout.write(content);
}
