import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import type { CliContext } from './CliContext.js';
import { addBenchCommand } from './commands/benchCommand.js';
import { addCompareCommand } from './commands/compareCommand.js';
import { addDemoCommand } from './commands/demoCommand.js';
import { addFlameGraphCommands } from './commands/flameGraphCommands.js';
import { addReplayCommand } from './commands/replayCommand.js';
import { addSnapshotCommand } from './commands/snapshotCommand.js';
import { addStatsCommand } from './commands/statsCommand.js';
import { addTraceCommand } from './commands/traceCommand.js';
import { addVizCommand } from './commands/vizCommand.js';
import { describeError, EXIT, exitCodeOf } from './exitCodes.js';

/** Where `runCli` writes; the process's standard streams by default. */
export interface CliIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

const PROCESS_IO: CliIo = { out: (t) => void process.stdout.write(t), err: (t) => void process.stderr.write(t) };

/**
 * Runs the `stowage` command line `args` (without `node` and the script) and resolves to its exit code (see
 * `EXIT`). Never rejects: a typed error becomes its message and a hint on stderr, anything else its stack.
 */
export async function runCli(args: readonly string[], io: CliIo = PROCESS_IO): Promise<number> {
  const context: CliContext = { out: io.out, err: io.err, exitCode: EXIT.ok };
  const program = createProgram(context, io);
  try {
    await program.parseAsync([...args], { from: 'user' });
    return context.exitCode;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    io.err(`${describeError(error)}\n`);
    return exitCodeOf(error);
  }
}

/** The command tree: every subcommand, with commander's usage errors thrown rather than exiting the process. */
export function createProgram(context: CliContext, io: CliIo = PROCESS_IO): Command {
  const version = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  const program = new Command('stowage')
    .description('Stowage from the command line: the demo, trace replays, benches, snapshots, the memory page, Chrome traces, and the summaries of PyTorch\'s _memory_viz (stats, segments, memory, compare, trace --list).')
    .version(version)
    .option('--json', 'print results as JSON (one document per line) for scripts; no progress bar')
    .showHelpAfterError('(run stowage --help, or stowage <command> --help, for usage)')
    .configureOutput({ writeOut: io.out, writeErr: io.err, outputError: (text, write) => write(`stowage: ${text.replace(/^error: /, '')}`) })
    .exitOverride();
  addDemoCommand(program, context);
  addReplayCommand(program, context);
  addBenchCommand(program, context);
  addSnapshotCommand(program, context);
  addVizCommand(program, context);
  addTraceCommand(program, context);
  addStatsCommand(program, context);
  addFlameGraphCommands(program, context);
  addCompareCommand(program, context);
  for (const command of program.commands) command.exitOverride().showHelpAfterError(`(run stowage ${command.name()} --help for usage)`);
  return program;
}
