import { expect } from 'chai';
import { formatDevice, InvalidArgumentError, parseDevice } from '@stowage/core';

describe('parseDevice', () => {
  it('reads type and index from text and objects', () => {
    expect(parseDevice('cpu')).to.deep.equal({ type: 'cpu', index: 0 });
    expect(parseDevice('webgpu:0')).to.deep.equal({ type: 'webgpu', index: 0 });
    expect(parseDevice('cuda:1')).to.deep.equal({ type: 'cuda', index: 1 });
    expect(parseDevice({ type: 'my-npu', index: 3 })).to.deep.equal({ type: 'my-npu', index: 3 });
    expect(formatDevice(parseDevice('cuda'))).to.equal('cuda:0');
  });

  for (const bad of ['', 'CUDA', 'cuda:-1', 'cuda:1.5', 'cuda:x', ':0', 42, null, { type: 'cuda', index: -1 }, { type: 'cuda', index: 0.5 }]) {
    it(`rejects ${JSON.stringify(bad)} with an InvalidArgumentError naming the argument`, () => {
      expect(() => parseDevice(bad as string)).to.throw(InvalidArgumentError, /^device/);
    });
  }
});

describe('formatDevice', () => {
  it("writes a device as its canonical text, 'type:index'", () => {
    expect(formatDevice(parseDevice('cuda:1'))).to.equal('cuda:1');
  });

  for (const bad of [null, undefined, 'cpu', { type: 'cpu' }, 3]) {
    it(`rejects ${JSON.stringify(bad) ?? 'undefined'} with an InvalidArgumentError, not a TypeError`, () => {
      expect(() => formatDevice(bad as never)).to.throw(InvalidArgumentError, /parseDevice/);
    });
  }
});
