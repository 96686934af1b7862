import { InvalidArgumentError } from '@stowage/core';
import { checkBoolean, checkCount, checkOptions } from '@stowage/core/plugin-kit';

/** What LMS does with the sequence it learns (Note [Speculation] in Speculation.ts). */
export interface SpeculationOptions {
  /** Start a page-out at the unpin of a storage the learned sequence reclaims before its next pin. Default true. */
  readonly pageOut?: boolean;
  /** Page in, ahead of need, storages the learned sequence pins soon. Default true. */
  readonly prefetch?: boolean;
  /** Learned sequences kept (iterations of different shapes); the most recent that matches predicts. Default 4. */
  readonly history?: number;
  /**
   * How far ahead prefetch may look, in events of the learned sequence (makes, pins, unpins, releases). Default:
   * the rest of the iteration, so that the room decides (Note [Prefetch room] in Speculation.ts): a page-in starts
   * as early as the room allows, which hides it behind as many kernels as it needs; a smaller value caps it.
   */
  readonly lookahead?: number;
}

/** Speculation settings with defaults filled in; `learn` is true when anything needs the learned sequence. */
export interface SpeculationSettings {
  readonly learn: boolean;
  readonly pageOut: boolean;
  readonly prefetch: boolean;
  readonly history: number;
  readonly lookahead: number;
}

export const SPECULATION_OFF: SpeculationSettings = Object.freeze({ learn: false, pageOut: false, prefetch: false, history: 4, lookahead: Number.POSITIVE_INFINITY });

/**
 * The settings of `lms({ speculation })`: `true` for every default, `false` or absent for none.
 * @throws InvalidArgumentError for an unknown key or a value of the wrong type
 */
export function resolveSpeculation(given: boolean | SpeculationOptions | undefined): SpeculationSettings {
  if (given === undefined || given === false) return SPECULATION_OFF;
  if (given === true) return Object.freeze({ learn: true, pageOut: true, prefetch: true, history: 4, lookahead: Number.POSITIVE_INFINITY });
  if (typeof given !== 'object' || given === null) {
    throw new InvalidArgumentError('options.speculation', given, 'true, false, or { pageOut?, prefetch?, history?, lookahead? }');
  }
  const options = checkOptions<SpeculationOptions>('options.speculation', given, ['pageOut', 'prefetch', 'history', 'lookahead']);
  checkBoolean('options.speculation.pageOut', options.pageOut);
  checkBoolean('options.speculation.prefetch', options.prefetch);
  if (options.history !== undefined) {
    checkCount('options.speculation.history', options.history);
    if (options.history < 1) throw new InvalidArgumentError('options.speculation.history', options.history, 'at least 1 learned sequence');
  }
  if (options.lookahead !== undefined) checkCount('options.speculation.lookahead', options.lookahead);
  const pageOut = options.pageOut ?? true;
  const prefetch = options.prefetch ?? true;
  return Object.freeze({ learn: pageOut || prefetch, pageOut, prefetch, history: options.history ?? 4, lookahead: options.lookahead ?? Number.POSITIVE_INFINITY });
}
