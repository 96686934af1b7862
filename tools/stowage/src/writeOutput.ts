import { writeFileSync } from 'node:fs';
import { InvalidArgumentError } from '@stowage/core';
import type { CliContext } from './CliContext.js';

/**
 * Writes `content` to the file `path`, or to standard output when `path` is `-` or undefined (binary content
 * to a pipe only: a terminal gets a note instead).
 * @throws InvalidArgumentError when the file cannot be written (no such directory, no permission)
 */
export function writeOutput(context: CliContext, path: string | undefined, content: string | Uint8Array): void {
  if (path !== undefined && path !== '-') {
    try {
      writeFileSync(path, content);
    } catch (error) {
      const reason = (error as { code?: string }).code ?? (error as Error).message;
      throw new InvalidArgumentError('-o', path, `a file in an existing, writable directory (writing failed: ${reason})`, { cause: error });
    }
    return;
  }
  if (typeof content === 'string') context.out(content);
  else if (process.stdout.isTTY) context.err('Not writing binary output to a terminal; give -o <file>.\n');
  else process.stdout.write(content);
}
