import { expect } from 'chai';
import { formatBytes, InvalidArgumentError, parseBytes } from '@stowage/core';

describe('formatBytes', () => {
  it('uses binary units with two decimals', () => {
    expect(formatBytes(0)).to.equal('0 B');
    expect(formatBytes(1023)).to.equal('1023 B');
    expect(formatBytes(1536)).to.equal('1.50 KiB');
    expect(formatBytes(3 * 2 ** 30)).to.equal('3.00 GiB');
  });

  it('carries into the next unit when rounding reaches 1024', () => {
    expect(formatBytes(2 ** 20 - 1)).to.equal('1.00 MiB');
    expect(formatBytes(1023.999)).to.equal('1.00 KiB');
  });

  it('prints a negative count (a difference) with its sign and a fraction (a mean) with two decimals', () => {
    expect(formatBytes(-1)).to.equal('-1 B');
    expect(formatBytes(-1536)).to.equal('-1.50 KiB');
    expect(formatBytes(0.5)).to.equal('0.50 B');
    expect(formatBytes(1536.5)).to.equal('1.50 KiB');
  });

  it('prints NaN and Infinity unscaled, never as "Infinity PiB", and refuses non-numbers with InvalidArgumentError', () => {
    expect(formatBytes(Number.NaN)).to.equal('NaN B');
    expect(formatBytes(Number.POSITIVE_INFINITY)).to.equal('Infinity B');
    expect(formatBytes(Number.NEGATIVE_INFINITY)).to.equal('-Infinity B');
    for (const bad of ['3', null, undefined, 3n]) {
      expect(() => formatBytes(bad as unknown as number), String(bad)).to.throw(InvalidArgumentError, /^bytes must be a number of bytes/);
    }
  });
});

describe('parseBytes', () => {
  it('reads numbers and sizes with binary and decimal units', () => {
    expect(parseBytes(42)).to.equal(42);
    expect(parseBytes('512MiB')).to.equal(512 * 2 ** 20);
    expect(parseBytes('1.5 GiB')).to.equal(1.5 * 2 ** 30);
    expect(parseBytes('64KB')).to.equal(64_000);
    expect(parseBytes('7')).to.equal(7);
  });

  it('returns undefined for anything that is not a size', () => {
    for (const bad of ['lots', '-1MiB', '1 XB', -1, 1.5, Number.NaN]) expect(parseBytes(bad)).to.equal(undefined);
  });

  it('rejects a fractional byte count written as text, as it does as a number', () => {
    expect(parseBytes(1.5)).to.equal(undefined);
    expect(parseBytes('1.5')).to.equal(undefined);
    expect(parseBytes('0.4 B')).to.equal(undefined);
  });
});
