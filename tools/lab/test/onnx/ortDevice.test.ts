import { expect } from 'chai';
import type { BufferCount } from '@stowage/lab/onnx';
import { copySharedUploads, countBuffers, installWebGpuGlobals } from '@stowage/lab/onnx';

/** What a stand-in queue's writeBuffer was given: the data's bytes as passed, and whether they were shared. */
interface Write {
  shared: boolean;
  bytes: number[];
  dataOffset: number | undefined;
  size: number | undefined;
}

/** A device with only what copySharedUploads and countBuffers touch: a queue recording writes, and createBuffer. */
function standInDevice(writes: Write[]): GPUDevice {
  const queue = {
    writeBuffer(_buffer: GPUBuffer, _offset: number, data: ArrayBufferView, dataOffset?: number, size?: number) {
      const view = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      writes.push({ shared: data.buffer instanceof SharedArrayBuffer, bytes: [...view], dataOffset, size });
    },
  };
  const createBuffer = (descriptor: GPUBufferDescriptor) => ({ size: descriptor.size, destroy() {} }) as unknown as GPUBuffer;
  return { queue, createBuffer } as unknown as GPUDevice;
}

describe('copySharedUploads', () => {
  it('passes a view of shared memory on as a copy of exactly the elements asked for', () => {
    const writes: Write[] = [];
    const device = copySharedUploads(standInDevice(writes));
    const shared = new Float32Array(new SharedArrayBuffer(16));
    shared.set([1, 2, 3, 4]);
    device.queue.writeBuffer({} as GPUBuffer, 0, shared, 1, 2);
    expect(writes).to.have.length(1);
    expect(writes[0]!.shared).to.equal(false);
    expect(writes[0]!.bytes).to.deep.equal([...new Uint8Array(Float32Array.from([2, 3]).buffer)]);
    expect(writes[0]!.dataOffset).to.equal(undefined);
  });

  it('passes a view of ordinary memory on unchanged', () => {
    const writes: Write[] = [];
    const device = copySharedUploads(standInDevice(writes));
    device.queue.writeBuffer({} as GPUBuffer, 0, new Uint8Array([5, 6, 7]), 1, 1);
    expect(writes).to.deep.equal([{ shared: false, bytes: [5, 6, 7], dataOffset: 1, size: 1 }]);
  });
});

describe('countBuffers', () => {
  it('counts calls, live and peak bytes, a buffer destroyed twice counted once', () => {
    const count: BufferCount = { calls: 0, liveBytes: 0, peakBytes: 0 };
    const device = countBuffers(standInDevice([]), count);
    const a = device.createBuffer({ size: 100, usage: 0 });
    device.createBuffer({ size: 50, usage: 0 });
    a.destroy();
    a.destroy();
    device.createBuffer({ size: 20, usage: 0 });
    expect(count).to.deep.equal({ calls: 3, liveBytes: 70, peakBytes: 150 });
  });
});

describe('installWebGpuGlobals', () => {
  it("makes the GPU navigator.gpu and Dawn's classes globals, and its undo removes exactly what it added", async () => {
    const scope = globalThis as Record<string, unknown>;
    const before = new Set(Object.getOwnPropertyNames(globalThis));
    const hadGpu = (scope['navigator'] as { gpu?: unknown } | undefined)?.gpu !== undefined;
    const gpu = {} as GPU;
    const undo = await installWebGpuGlobals(gpu);
    if (!hadGpu) expect((scope['navigator'] as { gpu?: unknown }).gpu).to.equal(gpu);
    expect(typeof scope['GPUBuffer']).to.equal('function');
    undo();
    expect(new Set(Object.getOwnPropertyNames(globalThis))).to.deep.equal(before);
    if (!hadGpu) expect((scope['navigator'] as { gpu?: unknown } | undefined)?.gpu).to.equal(undefined);
  });
});
