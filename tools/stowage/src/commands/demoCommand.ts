import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError as UsageError, Option } from 'commander';
import type { CliContext } from '../CliContext.js';
import { findRepoRoot } from '../findRepoRoot.js';
import { MissingFileError } from '@stowage/lab/replay';
import { runNode } from '../runNode.js';
import { checkOutputPath } from '../writeOutput.js';

/** The flags of the training example that `stowage demo` passes on. */
const TRAIN_FLAGS = ['model', 'fraction', 'policy', 'steps', 'device', 'record'] as const;

/**
 * `stowage demo`: the README's main job, what `pnpm demo` runs — the training loop under LMS
 * (examples/train), then the composition demo (examples/demo) — from the checkout's build.
 */
export function addDemoCommand(program: Command, context: CliContext): void {
  program
    .command('demo')
    .description("run the README's main job: the training loop under LMS, then the composition demo (what `pnpm demo` runs)")
    .addOption(new Option('--model <name>', 'the model the training loop trains').choices(['transformer', 'mlp']))
    .option('--fraction <f>', 'the LMS budget as a fraction of the unconstrained peak, in (0, 1]', checked((v) => Number(v) > 0 && Number(v) <= 1, 'a number in (0, 1]'))
    .addOption(new Option('--policy <name>', 'the LMS policy of the constrained run').choices(['lru', 'best-fit']))
    .option('--steps <n>', 'training steps', checked((v) => /^[1-9]\d*$/.test(v), 'a whole number of at least 1'))
    .addOption(new Option('--device <type>', 'where the tensors live').choices(['cpu', 'webgpu']))
    .option('--record <file>', "write the run under LMS as a snapshot with its events, for stowage viz and stowage trace --chrome")
    .option('--skip-train', 'run only the composition demo')
    .option('--skip-composition', 'run only the training loop')
    .action(async (options: Partial<Record<(typeof TRAIN_FLAGS)[number], string>> & { skipTrain?: boolean; skipComposition?: boolean }) => {
      checkOutputPath('--record', options.record);
      const root = findRepoRoot();
      const train = builtEntry(root, 'examples/train/dist/main.js');
      const demo = builtEntry(root, 'examples/demo/dist/main.js');
      if (!options.skipTrain) {
        // The examples run in the repository root: a recording's path is made absolute from where the command ran.
        const value = (flag: (typeof TRAIN_FLAGS)[number]): string | undefined => (flag === 'record' && options.record !== undefined ? resolve(options.record) : options[flag]);
        const args = TRAIN_FLAGS.flatMap((flag) => (options[flag] === undefined ? [] : [`--${flag}`, value(flag)!]));
        context.exitCode = await runNode(train, args, { cwd: root });
        if (context.exitCode !== 0) return;
      }
      if (!options.skipComposition) context.exitCode = await runNode(demo, [], { cwd: root });
    });
}

/** A commander argument parser that keeps a value `isValid` accepts and refuses others as a usage error. */
function checked(isValid: (value: string) => boolean, expected: string): (value: string) => string {
  return (value) => {
    if (!isValid(value)) throw new UsageError(`Expected ${expected}.`);
    return value;
  };
}

function builtEntry(root: string, path: string): string {
  const full = join(root, path);
  if (!existsSync(full)) throw new MissingFileError(full, 'the built example: run `pnpm build` at the repository root first');
  return full;
}
