import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError } from '@stowage/core';
import { nearestName } from '@stowage/core/plugin-kit';
import type { CliContext } from '../CliContext.js';
import { findRepoRoot } from '../findRepoRoot.js';
import { runShell } from '../runNode.js';

/** A root package.json `bench:<name>` script, split into its build step and the command that runs the bench. */
export interface BenchScript {
  readonly name: string;
  readonly build: string | undefined;
  readonly run: string;
}

/** The `bench:*` scripts of the root package.json at `root`, by name. */
export function listBenchScripts(root: string): BenchScript[] {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts?: Record<string, string> }).scripts ?? {};
  return Object.entries(scripts)
    .filter(([key]) => key.startsWith('bench:'))
    .map(([key, script]) => {
      const steps = script.split(' && ');
      const run = steps.pop()!;
      return { name: key.slice('bench:'.length), build: steps.length > 0 ? steps.join(' && ') : undefined, run };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** `stowage bench <name> [-- flags]`: builds and runs one of the root package.json's `bench:*` scripts. */
export function addBenchCommand(program: Command, context: CliContext): void {
  program
    .command('bench')
    .description("run one of the repository's benches (the root package.json bench:* scripts); flags after -- go to the bench")
    .argument('[name]', 'the bench: engine, lms, webgpu, cow, ipc, cuda… (leave out, or --list, to list them)')
    .argument('[flags...]', 'flags for the bench, after --, e.g. -- --quick')
    .option('--list', 'list the benches and exit')
    .option('--no-build', 'run the bench without building it first')
    .action(async (name: string | undefined, flags: string[], options: { list?: boolean; build: boolean }, command: Command) => {
      const root = findRepoRoot();
      const benches = listBenchScripts(root);
      const json = (command.optsWithGlobals() as { json?: boolean }).json === true;
      if (name === undefined || options.list) {
        if (json) context.out(`${JSON.stringify(benches)}\n`);
        else context.out(`${benches.map((b) => `${b.name.padEnd(18)} ${b.run}`).join('\n')}\n`);
        return;
      }
      const bench = benches.find((b) => b.name === name);
      if (bench === undefined) {
        const names = benches.map((b) => b.name);
        const near = nearestName(name, names);
        throw new InvalidArgumentError('bench name', name, `${near === undefined ? '' : `'${near}' (the nearest name) or `}one of ${names.join(', ')}`);
      }
      const bin = join(root, 'node_modules', '.bin');
      if (options.build && bench.build !== undefined) {
        context.exitCode = await runShell(bench.build, { cwd: root, extraPath: bin });
        if (context.exitCode !== 0) return;
      }
      context.exitCode = await runShell([bench.run, ...flags.map(quote)].join(' '), { cwd: root, extraPath: bin });
    });
}

function quote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}
