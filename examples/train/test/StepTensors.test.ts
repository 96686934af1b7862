import { expect } from 'chai';
import { createRuntime, InvalidArgumentError } from '@stowage/core';
import { StepTensors } from '@stowage/example-train';

describe('StepTensors', () => {
  it('releases on disposal what was tracked and neither freed nor handed over', async () => {
    await using rt = await createRuntime();
    const [a, b, c] = [rt.tensor([2, 2]), rt.tensor([2, 2]), rt.tensor([2, 2])];
    {
      using tensors = new StepTensors();
      tensors.track(a);
      tensors.track({ y: b, mean: c });
      expect(tensors.size).to.equal(3);
      tensors.free(a);
      tensors.untrack(c);
      expect(a.storage.isReleased).to.equal(true);
      expect(tensors.size).to.equal(1);
    }
    expect(b.storage.isReleased).to.equal(true);
    expect(c.storage.isReleased).to.equal(false);
  });

  it('refuses to free a tensor twice or one it does not track, releasing nothing', async () => {
    await using rt = await createRuntime();
    using tensors = new StepTensors();
    const a = tensors.track(rt.tensor([1, 4]));
    const stranger = rt.tensor([1, 4]);
    tensors.free(a);
    expect(() => tensors.free(a)).to.throw(InvalidArgumentError);
    expect(() => tensors.free(stranger)).to.throw(InvalidArgumentError);
    expect(() => tensors.untrack(stranger)).to.throw(InvalidArgumentError);
    expect(stranger.storage.isReleased).to.equal(false);
  });
});
