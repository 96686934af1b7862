import type { Command } from 'commander';
import { InvalidArgumentError } from '@stowage/core';
import { ALLOCATOR_CONFIGS } from '../allocatorConfigs.js';

/** The flags of the commands that replay a trace. */
export interface ReplayFlags {
  readonly allocator: string;
  readonly capacity?: string;
  readonly limit?: string;
  readonly device: string;
  readonly streams?: boolean;
  readonly json?: boolean;
}

/** Adds the replay flags (`--allocator`, `--capacity`, `--limit`, `--device`, `--streams`) to `command`. */
export function withReplayOptions(command: Command): Command {
  return command
    .option('-a, --allocator <name>', `allocator configuration: ${ALLOCATOR_CONFIGS.map((c) => c.name).join(', ')}`, 'pytorch')
    .option('--capacity <bytes>', "device capacity, e.g. 80GiB (default: unbounded, or PyTorch's when the trace ran out of memory)")
    .option('--limit <bytes>', "the allocator's memory limit, e.g. 40GiB")
    .option('--device <index>', "which device's trace of a snapshot", '0')
    .option('--streams', "allocate on the trace's streams rather than all on one");
}

/** `--device` as an index. @throws InvalidArgumentError for anything but a non-negative integer */
export function deviceIndex(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('--device', value, 'a device index (0, 1, …)');
  return Number(value);
}
