import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';

/** Options every adaptor refuses (ForwardingAllocator's own), with the message each must give. */
const FORWARDING_REFUSALS: readonly [unknown, RegExp][] = [
  [{ ownsUpstream: 'no' }, /options\.ownsUpstream must be true or false/],
  [{ ownUpstream: false }, /options\.ownUpstream.*did you mean ownsUpstream\?/],
  [[], /options must be an options object/],
];

/**
 * Checks that `make(options)` refuses each of the adaptors' common bad options, and each of `own` (the adaptor's
 * own), with an InvalidArgumentError whose message matches.
 */
export function expectRefusedOptions(make: (options: never) => unknown, own: readonly [unknown, RegExp][] = []): void {
  for (const [options, pattern] of [...FORWARDING_REFUSALS, ...own]) {
    let error: unknown;
    try {
      make(options as never);
    } catch (e) {
      error = e;
    }
    expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.match(pattern);
  }
}
