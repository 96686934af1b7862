import { expect } from 'chai';
import { isSmallRequest, roundSize, segmentSize } from '@stowage/core/plugin-kit';

const MiB = 1 << 20;

describe('roundSize', () => {
  it('rounds up to a multiple of 512 bytes with a 512-byte minimum', () => {
    expect([0, 1, 511, 512, 513, 1024, 1025].map((n) => roundSize(n, []))).to.deep.equal([512, 512, 512, 512, 1024, 1024, 1536]);
  });

  it('rounds to one of N divisions between powers of two when divisions are configured', () => {
    const four = new Array<number>(16).fill(4);
    // 1200 MiB lies between 1024 and 2048 MiB; four divisions are 1024, 1280, 1536, 1792.
    expect(roundSize(1200 * MiB, four)).to.equal(1280 * MiB);
    expect(roundSize(1280 * MiB, four)).to.equal(1280 * MiB);
    expect(roundSize(1024 * MiB, four)).to.equal(1024 * MiB);
    expect(roundSize(5 * MiB + 1, four)).to.equal(6 * MiB);
    // A request no larger than 512 B per division keeps plain 512-byte rounding.
    expect(roundSize(1500, four)).to.equal(1536);
  });

  it('uses the divisions of the size interval the request falls in', () => {
    const perInterval = [0, 0, 8]; // only [4 MiB, 8 MiB) is divided
    expect(roundSize(3 * MiB + 1, perInterval)).to.equal(3 * MiB + 512);
    expect(roundSize(4 * MiB + 1, perInterval)).to.equal(4.5 * MiB);
  });
});

describe('segmentSize', () => {
  it('gives small requests 2 MiB, large ones under 10 MiB 20 MiB, and rounds bigger ones to 2 MiB', () => {
    expect(segmentSize(512)).to.equal(2 * MiB);
    expect(segmentSize(MiB)).to.equal(2 * MiB);
    expect(segmentSize(MiB + 512)).to.equal(20 * MiB);
    expect(segmentSize(10 * MiB - 512)).to.equal(20 * MiB);
    expect(segmentSize(10 * MiB)).to.equal(10 * MiB);
    expect(segmentSize(11 * MiB)).to.equal(12 * MiB);
  });

  it('puts requests up to 1 MiB in the small pool', () => {
    expect(isSmallRequest(MiB)).to.equal(true);
    expect(isSmallRequest(MiB + 512)).to.equal(false);
  });
});
