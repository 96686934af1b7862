import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import { checkBoolean, checkEnum, checkFunction, checkOptions, checkReturned, describeValue } from '@stowage/core/plugin-kit';

describe('checkOptions', () => {
  it('takes undefined as no options and refuses null, arrays and primitives with InvalidArgumentError', () => {
    expect(checkOptions('options', undefined)).to.deep.equal({});
    for (const bad of [null, [], 'cpu', 3]) expect(() => checkOptions('options', bad as never), String(bad)).to.throw(InvalidArgumentError, /^options must be an options object/);
  });

  it('refuses an unknown key, naming it and the nearest known key', () => {
    expect(() => checkOptions('options', { limt: '1GiB' }, ['shared', 'limit'])).to.throw(InvalidArgumentError, /^options\.limt must be left out: .*did you mean limit\?/);
    expect(() => checkOptions('options', { zzz: 1 }, ['shared', 'limit']))
      .to.throw(InvalidArgumentError)
      .with.property('message')
      .that.matches(/known options are shared, limit/)
      .and.not.matches(/did you mean/);
    expect(checkOptions('options', { limit: 1, other: undefined }, ['limit']), 'an undefined value is no option').to.deep.equal({ limit: 1, other: undefined });
  });
});

describe('checkBoolean, checkEnum, checkFunction and checkReturned', () => {
  it('accept exactly their values and refuse truthy stand-ins with InvalidArgumentError', () => {
    expect(checkBoolean('options.shared', true)).to.equal(true);
    expect(checkBoolean('options.shared', undefined)).to.equal(undefined);
    for (const bad of ['no', 1, 0, null]) expect(() => checkBoolean('options.shared', bad), String(bad)).to.throw(InvalidArgumentError, /options\.shared must be true or false/);
    expect(checkEnum('mode', 'cow', ['alias', 'cow'])).to.equal('cow');
    expect(() => checkEnum('mode', 'COW', ['alias', 'cow'])).to.throw(InvalidArgumentError, /one of "alias", "cow"/);
    expect(() => checkFunction('wrap', {}, 'a function (allocator) => allocator')).to.throw(InvalidArgumentError, /wrap must be a function \(allocator\)/);
    const isNumber = (v: unknown): v is number => typeof v === 'number';
    expect(checkReturned('the factory "npu"', 3, isNumber, 'a number')).to.equal(3);
    expect(() => checkReturned('the factory "npu"', null, isNumber, 'a number')).to.throw(InvalidArgumentError, /^the value the factory "npu" returned must be a number; got null/);
  });
});

describe('describeValue', () => {
  it('shows plain objects by their keys, classes with the right article, and long strings cut short', () => {
    expect(describeValue({ a: 1, b: 'x' })).to.equal('{ a: 1, b: "x" }');
    expect(describeValue({ a: 1, b: 2, c: 3, d: 4, e: 5 })).to.equal('{ a: 1, b: 2, c: 3, d: 4, … }');
    expect(describeValue(new ArrayBuffer(1))).to.equal('an ArrayBuffer');
    expect(describeValue(new Map())).to.equal('a Map');
    expect(describeValue('x'.repeat(50))).to.equal(JSON.stringify(`${'x'.repeat(40)}…`));
    expect(describeValue(Object.create(null))).to.equal('{}');
  });
});
