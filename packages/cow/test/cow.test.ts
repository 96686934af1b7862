import { expect } from 'chai';
import { container } from 'tsyringe';
import { StowageError } from '@stowage/core';
import { registerCow } from '@stowage/cow';

describe('registerCow', () => {
  it('rejects null options with a typed error', () => {
    const c = container.createChildContainer();
    expect(() => registerCow(c, null as never)).to.throw(StowageError);
  });
});
