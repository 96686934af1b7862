import type { DeviceLike, Token } from '@stowage/core';
import type { LmsPolicy } from './LmsPolicy.js';
import type { Residency } from './Residency.js';
import type { SpeculationSettings } from './speculation/SpeculationOptions.js';

/**
 * Large Model Support in one runtime, as its users drive it: `resolve(rt.container, LmsController)` once `lms()` is
 * registered.
 */
export interface LmsController {
  /** What LMS does with the sequence it learns (Note [Speculation]). */
  readonly speculation: SpeculationSettings;
  /** The policy this runtime's LMS asks (resolved on first use, so a later registration still wins). */
  readonly policy: LmsPolicy;
  /**
   * LMS's state on `device` (its reclaim list, statistics, events), or undefined when no allocator of it pages.
   * @throws InvalidArgumentError for something that is not a device ('cuda:1', { type: 'cuda', index: 1 })
   */
  device(device: DeviceLike): Residency | undefined;
  /**
   * Marks the end of one iteration of the program's loop (a training step) on every device: the sequence of pins
   * since the last mark is learned, and the next iteration is predicted from it (Note [Speculation]). Call it at
   * the same point of every iteration; a program that never calls it gets no predictions.
   */
  endIteration(): void;
  /**
   * Reclaims every inactive storage on `device` (every device when absent); returns the bytes freed.
   * @throws InvalidArgumentError for something that is not a device
   */
  reclaimInactive(device?: DeviceLike): number;
}

export const LmsController: Token<LmsController> = Symbol('stowage.LmsController');
