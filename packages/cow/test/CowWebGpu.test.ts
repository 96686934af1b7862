import { expect } from 'chai';
import { createRuntime } from '@stowage/core';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import { cow, isCowDataPtr, lazyClone, materialize } from '@stowage/cow';

describe('lazyClone on WebGPU storages', function () {
  this.timeout(60_000);

  it('shares device data until a write, then copies it on the device in queue order', async function () {
    const context = await openWebGpuDevice().catch((error: Error) => error.message);
    if (typeof context === 'string') {
      console.log(`    skipped: no WebGPU adapter — ${context}`);
      this.skip();
    }
    await using rt = await createRuntime({ plugins: [webgpu({ device: context.device }), cow({ reshape: 'cow' })] });
    const t = rt.tensor([4, 4], { dtype: 'uint8', device: 'webgpu' });
    rt.write(t.storage, new Uint8Array(16).map((_, i) => i));
    const lazy = t.reshape([16]);
    expect(isCowDataPtr(lazy.storage.peekDataPtr())).to.equal(true);
    expect(lazy.storage.peekDataPtr().handle).to.equal(t.storage.peekDataPtr().handle);
    rt.write(t.storage, new Uint8Array([99]), 3); // materializes t: a copy on the device, then the write
    expect([...(await rt.read(lazy.storage))]).to.deep.equal([...new Uint8Array(16).map((_, i) => i)]);
    expect((await rt.read(t.storage))[3]).to.equal(99);
    expect(materialize(lazy.storage)).to.equal('stolen');
    const again = lazyClone(lazy.storage)!;
    expect(again.device).to.deep.equal({ type: 'webgpu', index: 0 });
  });
});
