import { allocatorContract } from '@stowage/core/testing';
import type { WebGpuContext } from '@stowage/allocator-webgpu';
import { allocatorOn, deviceOrSkip } from './testDevice.js';

/** The core conformance suite on a real Dawn device, both engine presets. */
for (const preset of ['pytorch', 'best'] as const) {
  describe(`WebGpuAllocator (${preset} preset) on a Dawn device (allocator contract)`, function () {
    this.timeout(60_000);
    let context: WebGpuContext;
    before(async function () {
      context = await deviceOrSkip(this);
    });
    for (const check of allocatorContract) {
      it(check.name, () => check.run(() => allocatorOn(context, { preset })));
    }
  });
}
