import { expect } from 'chai';
import { DEFAULT_MIN_SEGMENT_BYTES, webGpuSegmentSize } from '@stowage/allocator-webgpu';

const MiB = 2 ** 20;

describe('webGpuSegmentSize', () => {
  const size = webGpuSegmentSize(256 * MiB);

  it('reserves at least 48 MiB, however small the request', () => {
    expect(DEFAULT_MIN_SEGMENT_BYTES).to.equal(48 * MiB);
    expect(size(512, 0)).to.equal(48 * MiB);
  });

  it('gives a request larger than half the minimum a segment of its own size, rounded up to 2 MiB', () => {
    expect(size(100 * MiB, 0)).to.equal(100 * MiB);
    expect(size(25 * MiB, 0)).to.equal(26 * MiB);
    expect(size(24 * MiB, 0), 'half the minimum still shares').to.equal(48 * MiB);
    expect(size(300 * MiB, 0), 'capped at maxBufferSize: the engine then asks for the request itself').to.equal(256 * MiB);
  });

  it('grows with what is reserved (a sixteenth, in 2 MiB steps) and stops at maxBufferSize', () => {
    expect(size(512, 2048 * MiB)).to.equal(128 * MiB);
    expect(size(512, 2050 * MiB)).to.equal(130 * MiB);
    expect(size(512, 8192 * MiB)).to.equal(256 * MiB);
  });

  it('takes another minimum', () => {
    expect(webGpuSegmentSize(256 * MiB, 32 * MiB)(512, 0)).to.equal(32 * MiB);
  });
});
