import { expect } from 'chai';
import { container } from 'tsyringe';
import { InvalidArgumentError, StowageError } from '@stowage/core';
import { cow } from '@stowage/cow';

describe('cow', () => {
  it('rejects null options with a typed error, also when its register is called directly', () => {
    const c = container.createChildContainer();
    expect(() => cow(null as never).register(c)).to.throw(StowageError);
  });
});

describe('cow', () => {
  it('refuses an unknown option key (naming the nearest), an unknown reshape mode and options that are not an object', () => {
    const bad: [unknown, RegExp][] = [
      [{ reshap: 'cow' }, /options\.reshap.*did you mean reshape\?/],
      [{ reshape: 'copy' }, /options\.reshape must be one of "alias", "cow", "warn"/],
      [[], /options must be an options object/],
      ['cow', /options must be an options object/],
    ];
    for (const [options, pattern] of bad) {
      let error: unknown;
      try {
        cow(options as never);
      } catch (e) {
        error = e;
      }
      expect(error, `${JSON.stringify(options)}: ${String(error)}`).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
    }
    expect(cow({ reshape: 'warn' }).name).to.equal('cow');
  });
});
