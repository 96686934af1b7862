import { readFileSync } from 'node:fs';
import type { HelpContext } from 'commander';
import { Command, CommanderError } from 'commander';
import { nearestName } from '@stowage/core/plugin-kit';
import type { CliContext, CliStdin } from './CliContext.js';
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

/** Where `runCli` writes and what `-` reads; the process's standard streams by default. */
export interface CliIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  /**
   * Writes binary output (a pickle given `-o -`); returns false, writing nothing, where binary output must not go
   * (a terminal). Default: process.stdout unless it is a terminal; an `io` without it refuses binary output.
   */
  readonly outBytes?: (bytes: Uint8Array) => boolean;
  /** What an input of `-` reads. Default: process.stdin. */
  readonly stdin?: CliStdin;
}

const PROCESS_IO: CliIo = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
  outBytes: (bytes) => {
    if (process.stdout.isTTY === true) return false;
    process.stdout.write(bytes);
    return true;
  },
};

/**
 * Runs the `stowage` command line `args` (without `node` and the script) and resolves to its exit code (see
 * `EXIT`). Never rejects: a typed error becomes its message and a hint on stderr, anything else its stack.
 */
export async function runCli(args: readonly string[], io: CliIo = PROCESS_IO): Promise<number> {
  const context: CliContext = { out: io.out, err: io.err, outBytes: io.outBytes ?? (() => false), stdin: io.stdin ?? process.stdin, exitCode: EXIT.ok };
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
  const program = new StowageProgram('stowage')
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
  addHelpCommand(program);
  for (const command of program.commands) command.exitOverride().showHelpAfterError(`(run stowage ${command.name()} --help for usage)`);
  return program;
}

/**
 * The program's command: given no command (`stowage`, `stowage --json`), it says so in one line, as for any other
 * usage error, where commander prints its whole help on stderr.
 */
class StowageProgram extends Command {
  override help(context?: HelpContext): never;
  override help(cb: (str: string) => string): never;
  override help(context?: HelpContext | ((str: string) => string)): never {
    if (typeof context === 'object' && context.error) {
      const names = this.commands.map((c) => c.name());
      this.error(`no command given: give one of ${names.slice(0, -1).join(', ')} or ${names.at(-1)}`, { exitCode: EXIT.usage, code: 'stowage.missingCommand' });
    }
    return super.help(context as HelpContext);
  }
}

/**
 * `stowage help [command]`: the help of the program or of a command, on stdout. Replaces commander's own, which
 * answers an unknown name with the whole help on stderr; this one refuses it in one line, as an unknown command.
 */
function addHelpCommand(program: Command): void {
  program.helpCommand(false);
  program
    .command('help')
    .description('display help for command')
    .argument('[command]', 'the command to describe')
    .action((name: string | undefined) => {
      if (name === undefined) return void program.outputHelp();
      const command = program.commands.find((c) => c.name() === name);
      if (command !== undefined) return void command.outputHelp();
      const near = nearestName(name, program.commands.map((c) => c.name()));
      program.error(`unknown command '${name}'${near === undefined ? '' : `\n(Did you mean ${near}?)`}`, { exitCode: EXIT.usage, code: 'commander.unknownCommand' });
    });
}
