import { expect } from 'chai';
import {
  BackendUnavailableError,
  DeviceMismatchError,
  DisposedError,
  DoubleFreeError,
  ForeignPointerError,
  InvalidArgumentError,
  isOutOfMemoryError,
  isStowageError,
  StowageError,
  UseAfterReleaseError,
} from '@stowage/core';

describe('StowageError', () => {
  it('gives each subclass a stable code and its own name', () => {
    const cases: [StowageError, string][] = [
      [new DoubleFreeError('m'), 'DOUBLE_FREE'],
      [new ForeignPointerError('m'), 'FOREIGN_POINTER'],
      [new UseAfterReleaseError('m'), 'USE_AFTER_RELEASE'],
      [new DeviceMismatchError('m'), 'DEVICE_MISMATCH'],
      [new BackendUnavailableError('m'), 'BACKEND_UNAVAILABLE'],
      [new DisposedError('m'), 'DISPOSED'],
      [new InvalidArgumentError('nbytes', -1, 'positive'), 'INVALID_ARGUMENT'],
    ];
    for (const [error, code] of cases) {
      expect(error).to.be.instanceOf(StowageError).and.instanceOf(Error);
      expect(error.code).to.equal(code);
      expect(error.name).to.equal(error.constructor.name);
      expect(isStowageError(error, code as StowageError['code'])).to.equal(true);
      expect(isOutOfMemoryError(error)).to.equal(false);
    }
  });

  it('names the argument, the expectation and the value in InvalidArgumentError', () => {
    const error = new InvalidArgumentError('sizes[1]', 'x', 'a non-negative integer');
    expect(error.message).to.equal('sizes[1] must be a non-negative integer; got "x".');
    expect(error.argument).to.equal('sizes[1]');
    expect(error.value).to.equal('x');
  });

  it('keeps the cause of a wrapped failure', () => {
    const cause = new Error('driver said no');
    expect(new BackendUnavailableError('no driver', { cause }).cause).to.equal(cause);
  });
});
