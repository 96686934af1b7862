import type { DependencyContainer } from 'tsyringe';
import type { Plugin } from '@stowage/core';
import { InvalidArgumentError, resolve } from '@stowage/core';
import { AllocatorDecorator, checkOptions, isDeviceType, LmsReclaimer } from '@stowage/core/plugin-kit';
import { LmsController } from './LmsController.js';
import { Residencies } from './Residencies.js';
import { checkPolicy, LmsPolicy } from './LmsPolicy.js';
import type { BuiltInPolicyName } from './policies.js';
import { BUILT_IN_POLICIES } from './policies.js';
import type { SpeculationOptions, SpeculationSettings } from './speculation/SpeculationOptions.js';
import { resolveSpeculation } from './speculation/SpeculationOptions.js';

export interface LmsOptions {
  /**
   * The policy choosing what to reclaim: `'lru'` (IBM's, the default), `'best-fit'`, `'speculative'` (farthest
   * predicted next use), or a policy object.
   */
  readonly policy?: BuiltInPolicyName | LmsPolicy;
  /**
   * Learn the program's sequence of pins iteration by iteration (mark each end with
   * `LmsController#endIteration`) and act on it: speculative page-out and prefetch (Note [Speculation] in
   * speculation/Speculation.ts). `true` for both with defaults; off when absent.
   */
  readonly speculation?: boolean | SpeculationOptions;
  /** Device types whose allocators page under LMS when they can. Default: `['cpu', 'webgpu', 'cuda']`. */
  readonly devices?: readonly string[];
}

const DEFAULT_DEVICES = ['cpu', 'webgpu', 'cuda'] as const;

/**
 * Registers Large Model Support in a runtime's container: the policy under LmsPolicy, the controller under
 * LmsController and LmsReclaimer (the engines' out-of-memory chain calls it), and a decorator per device type
 * that puts every allocator that can page under LMS. LMS works under each allocator's own budget (the device
 * plugin's `limit`); it adds none. On or off per runtime, from its creation: every storage the runtime makes on
 * a paging device gets an LMS object.
 * @throws InvalidArgumentError for unknown options, an unknown policy name or a policy without chooseOne and
 * chooseFragments, or devices that are not a list of device type names
 */
export function registerLms(container: DependencyContainer, options: LmsOptions = {}): void {
  const { policy, devices, speculation } = checkLmsOptions(options);
  if (typeof policy === 'string') container.register(LmsPolicy, { useClass: BUILT_IN_POLICIES[policy] });
  else container.register(LmsPolicy, { useValue: policy });
  const controller = new Residencies(() => resolve(container, LmsPolicy), speculation);
  container.register(LmsController, { useValue: controller });
  container.register(LmsReclaimer, { useValue: controller });
  for (const deviceType of devices) {
    // Outermost: whatever adaptors are registered, and in whatever order, the allocator the runtime hands out is
    // LMS's, which answers asLmsStorage; LMS reaches the device through its services, never through the chain.
    const decorator: AllocatorDecorator = { deviceType, outermost: true, wrap: (allocator, device, services, provide) => controller.wrap(allocator, device, services, provide) };
    container.register(AllocatorDecorator, { useValue: decorator });
  }
}

/**
 * The LMS plugin: `createRuntime({ plugins: [cpu({ limit: '512MiB' }), lms({ policy: 'best-fit' })] })`;
 * `lms({ policy: 'speculative', speculation: true })` learns the loop and pages ahead of it.
 */
export function lms(options: LmsOptions = {}): Plugin {
  checkLmsOptions(options);
  return { name: 'lms', register: (container) => registerLms(container, options) };
}

function checkLmsOptions(options: LmsOptions | undefined): { policy: BuiltInPolicyName | LmsPolicy; devices: readonly string[]; speculation: SpeculationSettings } {
  const checked = checkOptions<LmsOptions>('options', options, ['policy', 'devices', 'speculation']);
  const policy: unknown = checked.policy ?? 'lru';
  if (typeof policy === 'string') {
    if (!Object.hasOwn(BUILT_IN_POLICIES, policy)) {
      throw new InvalidArgumentError('options.policy', policy, `one of ${Object.keys(BUILT_IN_POLICIES).map((n) => `'${n}'`).join(', ')}, or an LmsPolicy object`);
    }
  } else {
    checkPolicy('options.policy', policy);
  }
  const devices: unknown = checked.devices === undefined ? DEFAULT_DEVICES : checked.devices;
  if (!Array.isArray(devices) || devices.length === 0 || !devices.every(isDeviceType)) {
    throw new InvalidArgumentError('options.devices', devices, "a non-empty list of lowercase device types such as ['cpu', 'webgpu'] (types, not devices: 'cpu', not 'cpu:0')");
  }
  return { policy: policy as BuiltInPolicyName | LmsPolicy, devices: devices as string[], speculation: resolveSpeculation(checked.speculation) };
}
