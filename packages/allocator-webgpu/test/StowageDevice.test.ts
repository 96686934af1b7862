import { expect } from 'chai';
import { createRuntime, InvalidArgumentError } from '@stowage/core';
import type { WebGpuAllocator, WebGpuContext } from '@stowage/allocator-webgpu';
import { stowageDevice, stowageDeviceCounts, webgpu, WebGpuBuffers } from '@stowage/allocator-webgpu';
import { allocatorOn, COPY_DST, COPY_SRC, deviceOrSkip, MAP_READ, readBuffer, STORAGE } from './testDevice.js';

const INDIRECT = 0x0100;
const MAP_WRITE = 0x0002;
const UNIFORM = 0x0040;

/** Reads `size` bytes of `buffer` (a stand-in or not) through a staging buffer, all through `device`. */
function read(device: GPUDevice, buffer: GPUBuffer, size = buffer.size, offset = 0): Promise<Uint8Array> {
  return readBuffer(device, buffer, offset, size);
}

async function readFloats(device: GPUDevice, buffer: GPUBuffer): Promise<number[]> {
  return Array.from(new Float32Array((await read(device, buffer)).buffer));
}

/** Runs `body` in a validation error scope and returns the error message, or undefined when there was none. */
async function validationError(device: GPUDevice, body: () => void | Promise<void>): Promise<string | undefined> {
  device.pushErrorScope('validation');
  await body();
  const error = await device.popErrorScope();
  return error?.message;
}

/** Submits one pass that sets `pipeline` and `group` and dispatches one workgroup. */
function dispatchOnce(device: GPUDevice, pipeline: GPUComputePipeline, group: GPUBindGroup): void {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group);
  pass.dispatchWorkgroups(1);
  pass.end();
  device.queue.submit([encoder.finish()]);
}

function storageBuffer(device: GPUDevice, values: number[]): GPUBuffer {
  const buffer = device.createBuffer({ size: values.length * 4, usage: STORAGE | COPY_SRC | COPY_DST });
  device.queue.writeBuffer(buffer, 0, new Float32Array(values));
  return buffer;
}

describe('stowageDevice', function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  let allocator: WebGpuAllocator;
  let device: GPUDevice;
  before(async function () {
    context = await deviceOrSkip(this);
  });
  beforeEach(() => {
    allocator = allocatorOn(context);
    device = stowageDevice(allocator);
  });
  afterEach(() => allocator.dispose());

  describe('#createBuffer', () => {
    it('returns storage buffers that are ranges of one segment and report the size and usage asked for', () => {
      const a = device.createBuffer({ size: 10, usage: STORAGE | COPY_DST });
      const b = device.createBuffer({ size: 1000, usage: STORAGE | COPY_SRC | COPY_DST });
      const staging = device.createBuffer({ size: 16, usage: MAP_READ | COPY_DST });
      expect(a.size).to.equal(10);
      expect(a.usage).to.equal(STORAGE | COPY_DST);
      expect(a).to.be.an.instanceOf(Object.getPrototypeOf(staging).constructor as new () => GPUBuffer);
      expect(allocator.backend.createdBuffers, 'one segment holds both').to.equal(1);
      expect(allocator.memoryStats()['allocation.all.current']).to.equal(2);
      expect(stowageDeviceCounts(device)).to.include({ createBuffer: 3, subAllocated: 2 });
      b.destroy();
      a.destroy();
      staging.destroy();
    });

    it('passes buffers that are neither storage, uniform, upload nor readback through to the real device', () => {
      const other = device.createBuffer({ size: 16, usage: MAP_WRITE | COPY_SRC });
      expect(stowageDeviceCounts(device)).to.include({ createBuffer: 1, subAllocated: 0, readbacks: 0 });
      expect(device.createBuffer({ size: 16, usage: UNIFORM | STORAGE }).size).to.equal(16);
      expect(stowageDeviceCounts(device)!.subAllocated).to.equal(0);
      other.destroy();
    });

    // Note [Mapped at creation]: a mapped storage buffer and an upload are ranges written at their unmap.
    it('serves a storage buffer made mapped at creation from a range, with what was written before the unmap', async () => {
      const mapped = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC, mappedAtCreation: true });
      expect(mapped.mapState).to.equal('mapped');
      new Float32Array(mapped.getMappedRange(8, 8)).set([3, 4]);
      new Float32Array(mapped.getMappedRange(0, 4)).set([1]);
      mapped.unmap();
      expect(mapped.mapState).to.equal('unmapped');
      expect(stowageDeviceCounts(device)).to.include({ subAllocated: 1, mappedAtCreation: 1 });
      expect(await readFloats(device, mapped)).to.deep.equal([1, 0, 3, 4]);
      expect(() => mapped.getMappedRange()).to.throw(/not mapped/);
    });

    // Note [Uploads written where they go].
    it('writes an upload copied into a new range at once, holding no device memory for it', async () => {
      const segments = allocator.backend.createdBuffers;
      const upload = device.createBuffer({ size: 16, usage: MAP_WRITE | COPY_SRC, mappedAtCreation: true });
      new Float32Array(upload.getMappedRange()).set([5, 6, 7, 8]);
      upload.unmap();
      const target = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(upload, 4, target, 0, 12);
      upload.destroy();
      device.queue.submit([encoder.finish()]);
      expect(await readFloats(device, target)).to.deep.equal([6, 7, 8, 0]);
      expect(stowageDeviceCounts(device)).to.include({ mappedAtCreation: 1, subAllocated: 1, scratch: 0 });
      expect(allocator.backend.createdBuffers - segments, 'the storage segment only').to.equal(1);
    });

    it('copies an upload into a range already in use from a range of another segment, in command order', async () => {
      const target = storageBuffer(device, [1, 2, 3, 4]);
      const saved = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC | COPY_DST });
      const upload = device.createBuffer({ size: 16, usage: MAP_WRITE | COPY_SRC, mappedAtCreation: true });
      new Float32Array(upload.getMappedRange()).set([5, 6, 7, 8]);
      upload.unmap();
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(target, 0, saved, 0, 16); // must see the old bytes
      encoder.copyBufferToBuffer(upload, 0, target, 0, 16);
      device.queue.submit([encoder.finish()]);
      upload.destroy();
      expect(await readFloats(device, saved)).to.deep.equal([1, 2, 3, 4]);
      expect(await readFloats(device, target)).to.deep.equal([5, 6, 7, 8]);
      expect(stowageDeviceCounts(device)!.subAllocated, 'the upload became a range').to.equal(3);
    });

    // Note [Pooled readback buffers].
    it('backs readback buffers with pooled real buffers, reused by the next read', async () => {
      const source = storageBuffer(device, [1, 2, 3, 4]);
      expect(await readFloats(device, source)).to.deep.equal([1, 2, 3, 4]);
      expect(await read(device, source, 8, 8)).to.deep.equal(new Uint8Array(new Float32Array([3, 4]).buffer));
      expect(stowageDeviceCounts(device), "the second read reused the first one's buffer").to.include({ readbacks: 2, readbackBuffers: 1 });
    });

    it('gives a new buffer zeros where a destroyed one wrote', async () => {
      const first = storageBuffer(device, [1, 2, 3, 4]);
      device.queue.submit([]);
      first.destroy();
      device.queue.submit([]); // the free waits for a submit (Note [Submit epochs])
      const second = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC });
      expect(await readFloats(device, second)).to.deep.equal([0, 0, 0, 0]);
    });

    it('keeps a destroyed range for work recorded before the destroy and submitted after it', async () => {
      const source = storageBuffer(device, [5, 6, 7, 8]);
      device.queue.submit([]);
      const out = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC | COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(source, 0, out, 0, 16);
      source.destroy();
      const next = storageBuffer(device, [-1, -1, -1, -1]); // must not take the source's range yet
      device.queue.submit([encoder.finish()]);
      expect(await readFloats(device, out)).to.deep.equal([5, 6, 7, 8]);
      expect(await readFloats(device, next)).to.deep.equal([-1, -1, -1, -1]);
    });
  });

  describe('#queue.writeBuffer', () => {
    it('writes at the range and from views of shared memory', async () => {
      const buffer = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC | COPY_DST });
      const shared = new Float32Array(new SharedArrayBuffer(32));
      shared.set([9, 1, 2, 3, 4, 9, 9, 9]);
      const error = await validationError(device, () => device.queue.writeBuffer(buffer, 4, shared, 1, 3));
      expect(error).to.equal(undefined);
      expect(await readFloats(device, buffer)).to.deep.equal([0, 1, 2, 3]);
    });
  });

  describe('#createShaderModule and #createBindGroupLayout', () => {
    // Measure 1 of issue 36: a range read and another range of the same segment written in one dispatch.
    it('runs a dispatch that reads one range of a segment and writes another', async () => {
      const input = storageBuffer(device, [1, 2, 3, 4]);
      const output = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC });
      const module = device.createShaderModule({
        code: `@group(0) @binding(0) var<storage, read> a: array<f32>;
               @group(0) @binding(1) var<storage, read_write> out: array<f32>;
               @compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3u) { out[id.x] = a[id.x] * 2.0; }`,
      });
      const layout = device.createBindGroupLayout({
        entries: [
          { binding: 0, visibility: 4, buffer: { type: 'read-only-storage' } },
          { binding: 1, visibility: 4, buffer: { type: 'storage' } },
        ],
      });
      const error = await validationError(device, () => {
        const pipeline = device.createComputePipeline({ layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }), compute: { module, entryPoint: 'main' } });
        const group = device.createBindGroup({ layout, entries: [{ binding: 0, resource: { buffer: input } }, { binding: 1, resource: { buffer: output } }] });
        dispatchOnce(device, pipeline, group);
      });
      expect(error).to.equal(undefined);
      expect(await readFloats(device, output)).to.deep.equal([2, 4, 6, 8]);
    });
  });

  describe('#createBindGroup', () => {
    // Measure 2 of issue 36: Mul(x, x) binds x twice; both bindings are writable after measure 1.
    it('runs a dispatch that binds one range twice, reading what an earlier dispatch of the pass wrote', async () => {
      const x = storageBuffer(device, [1, 2, 3, 4]);
      const y = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC });
      const square = device.createShaderModule({
        code: `@group(0) @binding(0) var<storage, read> a: array<f32>;
               @group(0) @binding(1) var<storage, read> b: array<f32>;
               @group(0) @binding(2) var<storage, read_write> out: array<f32>;
               @compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3u) { out[id.x] = a[id.x] * b[id.x]; }`,
      });
      const addOne = device.createShaderModule({
        code: `@group(0) @binding(0) var<storage, read_write> x: array<f32>;
               @compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3u) { x[id.x] = x[id.x] + 1.0; }`,
      });
      const error = await validationError(device, () => {
        const squarePipeline = device.createComputePipeline({ layout: 'auto', compute: { module: square, entryPoint: 'main' } });
        const addPipeline = device.createComputePipeline({ layout: 'auto', compute: { module: addOne, entryPoint: 'main' } });
        const squareGroup = device.createBindGroup({
          layout: squarePipeline.getBindGroupLayout(0),
          entries: [{ binding: 0, resource: { buffer: x } }, { binding: 1, resource: { buffer: x } }, { binding: 2, resource: { buffer: y } }],
        });
        const addGroup = device.createBindGroup({ layout: addPipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: x } }] });
        const encoder = device.createCommandEncoder();
        const pass = encoder.beginComputePass();
        pass.setPipeline(addPipeline);
        pass.setBindGroup(0, addGroup);
        pass.dispatchWorkgroups(1);
        pass.setPipeline(squarePipeline);
        pass.setBindGroup(0, squareGroup);
        pass.dispatchWorkgroups(1);
        pass.end();
        device.queue.submit([encoder.finish()]);
      });
      expect(error).to.equal(undefined);
      expect(await readFloats(device, y)).to.deep.equal([4, 9, 16, 25]);
      expect(stowageDeviceCounts(device)!.aliasCopies).to.equal(1);
    });

    // Note [Uniform ranges]: a uniform range is bound as a uniform beside writable storage, and an alias copy
    // (writable) must not lie in its segment.
    it('binds a uniform range beside one range bound twice', async () => {
      const x = storageBuffer(device, [1, 2, 3, 4]);
      const y = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC });
      const scale = device.createBuffer({ size: 16, usage: UNIFORM | COPY_DST });
      device.queue.writeBuffer(scale, 0, new Float32Array([10, 0, 0, 0]));
      const module = device.createShaderModule({
        code: `@group(0) @binding(0) var<storage, read> a: array<f32>;
               @group(0) @binding(1) var<storage, read> b: array<f32>;
               @group(0) @binding(2) var<storage, read_write> out: array<f32>;
               @group(0) @binding(3) var<uniform> k: vec4f;
               @compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3u) { out[id.x] = a[id.x] * b[id.x] * k.x; }`,
      });
      const error = await validationError(device, () => {
        const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
        const group = device.createBindGroup({
          layout: pipeline.getBindGroupLayout(0),
          entries: [{ binding: 0, resource: { buffer: x } }, { binding: 1, resource: { buffer: x } }, { binding: 2, resource: { buffer: y } }, { binding: 3, resource: { buffer: scale } }],
        });
        dispatchOnce(device, pipeline, group);
      });
      expect(error).to.equal(undefined);
      expect(await readFloats(device, y)).to.deep.equal([10, 40, 90, 160]);
      expect(stowageDeviceCounts(device)).to.include({ uniforms: 1, aliasCopies: 1 });
    });

    it('binds a range at the offset and size of the entry', async () => {
      const x = storageBuffer(device, [1, 2, 3, 4, 5, 6, 7, 8]);
      const out = device.createBuffer({ size: 512, usage: STORAGE | COPY_SRC });
      const module = device.createShaderModule({
        code: `@group(0) @binding(0) var<storage, read_write> x: array<f32>;
               @compute @workgroup_size(1) fn main() { x[0] = f32(arrayLength(&x)); }`,
      });
      const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
      const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out, offset: 256, size: 12 } }] });
      dispatchOnce(device, pipeline, group);
      expect(new Float32Array((await read(device, out, 4, 256)).buffer)[0]).to.equal(3);
      expect(await readFloats(device, x)).to.deep.equal([1, 2, 3, 4, 5, 6, 7, 8]);
    });
  });

  describe('#createCommandEncoder', () => {
    // Measure 3 of issue 36: WebGPU refuses copyBufferToBuffer within one buffer, even between disjoint ranges.
    it('copies between two ranges of one segment', async () => {
      const source = storageBuffer(device, [1, 2, 3, 4]);
      const target = device.createBuffer({ size: 16, usage: STORAGE | COPY_SRC | COPY_DST });
      expect(allocator.backend.createdBuffers).to.equal(1);
      const error = await validationError(device, () => {
        const encoder = device.createCommandEncoder();
        encoder.copyBufferToBuffer(source, 4, target, 8, 8);
        device.queue.submit([encoder.finish()]);
      });
      expect(error).to.equal(undefined);
      expect(await readFloats(device, target)).to.deep.equal([0, 0, 2, 3]);
      expect(stowageDeviceCounts(device)!.scratch).to.equal(1);
      expect(allocator.memoryStats()['allocation.all.current'], 'the scratch range was freed after the submit').to.equal(2);
    });

    it('clears a range and nothing beside it', async () => {
      const a = storageBuffer(device, [1, 2, 3, 4]);
      const b = storageBuffer(device, [5, 6, 7, 8]);
      const encoder = device.createCommandEncoder();
      encoder.clearBuffer(a, 4, 8);
      device.queue.submit([encoder.finish()]);
      expect(await readFloats(device, a)).to.deep.equal([1, 0, 0, 4]);
      expect(await readFloats(device, b)).to.deep.equal([5, 6, 7, 8]);
    });

    // onnxruntime-web asks INDIRECT of every storage buffer, and binds an indirect dispatch's arguments as an input.
    it('dispatches indirectly from a range that the dispatch also binds', async () => {
      const indirect = device.createBuffer({ size: 16, usage: INDIRECT | STORAGE | COPY_SRC | COPY_DST });
      device.queue.writeBuffer(indirect, 0, new Uint32Array([2, 1, 1, 0]));
      const out = device.createBuffer({ size: 32, usage: STORAGE | INDIRECT | COPY_SRC });
      expect(stowageDeviceCounts(device)!.subAllocated, 'INDIRECT buffers are ranges too').to.equal(2);
      const module = device.createShaderModule({
        code: `@group(0) @binding(0) var<storage, read_write> out: array<f32>;
               @group(0) @binding(1) var<storage, read> args: array<u32>;
               @compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3u) { out[id.x] = f32(args[0]); }`,
      });
      const error = await validationError(device, () => {
        const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
        const encoder = device.createCommandEncoder();
        const pass = encoder.beginComputePass();
        pass.setPipeline(pipeline);
        const entries = [{ binding: 0, resource: { buffer: out } }, { binding: 1, resource: { buffer: indirect } }];
        pass.setBindGroup(0, device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries }));
        pass.dispatchWorkgroupsIndirect(indirect, 0);
        pass.end();
        device.queue.submit([encoder.finish()]);
      });
      expect(error).to.equal(undefined);
      expect(await readFloats(device, out)).to.deep.equal([2, 2, 2, 2, 2, 2, 2, 2]);
      expect(stowageDeviceCounts(device)!.indirectCopies).to.equal(1);
    });
  });

  describe('(runtime)', () => {
    it("sub-allocates from the runtime's WebGPU device under its budget", async () => {
      const rt = await createRuntime({ plugins: [webgpu({ device: context.device, limit: '64MiB' })] });
      try {
        const onRuntime = stowageDevice(rt, 'webgpu:0');
        const buffer = storageBuffer(onRuntime, [3, 1, 4, 1]);
        expect(await readFloats(onRuntime, buffer)).to.deep.equal([3, 1, 4, 1]);
        expect(rt.service(WebGpuBuffers, 'webgpu:0')!.memoryStats()['allocation.all.current']).to.equal(1);
      } finally {
        rt.dispose();
      }
    });

    it('refuses a source that is neither a runtime nor WebGPU buffers with InvalidArgumentError', () => {
      expect(() => stowageDevice({} as never)).to.throw(InvalidArgumentError, /source/);
      expect(() => stowageDevice(null as never)).to.throw(InvalidArgumentError, /source/);
    });
  });
});
