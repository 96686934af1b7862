import { expect } from 'chai';
import { createRuntime, InvalidArgumentError } from '@stowage/core';
import { cow, isCowDataPtr } from '@stowage/cow';

describe('CowReshapePolicy', () => {
  it('returns a lazy copy for a viewable reshape and a real copy otherwise; neither aliases the input', async () => {
    await using rt = await createRuntime({ plugins: [cow({ reshape: 'cow' })] });
    const t = rt.tensor([2, 3], { dtype: 'uint8' });
    rt.write(t.storage, new Uint8Array([1, 2, 3, 4, 5, 6]));
    const lazy = t.reshape([3, 2]);
    expect(lazy.storage).to.not.equal(t.storage);
    expect(isCowDataPtr(lazy.storage.peekDataPtr())).to.equal(true);
    rt.write(t.storage, new Uint8Array([9]));
    expect([...(await rt.read(lazy.storage))]).to.deep.equal([1, 2, 3, 4, 5, 6]);
    const transposed = t.asStrided([3, 2], [1, 3]).reshape([6]);
    expect(isCowDataPtr(transposed.storage.peekDataPtr())).to.equal(false);
    expect([...(await rt.read(transposed.storage))]).to.deep.equal([9, 4, 2, 5, 3, 6]);
  });

  it('keeps the alias policy by default and rejects an unknown mode', async () => {
    await using rt = await createRuntime({ plugins: [cow()] });
    const t = rt.tensor([2, 3]);
    expect(t.reshape([6]).storage).to.equal(t.storage);
    // Refused when the plugin is made, as cow() documents, before any runtime is composed.
    expect(() => cow({ reshape: 'bogus' as 'cow' })).to.throw(InvalidArgumentError, /options\.reshape/);
  });
});
