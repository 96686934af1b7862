/**
 * Copies bytes between GPUBuffers at any offsets and lengths. `copyBufferToBuffer` and `writeBuffer` need
 * offsets and sizes that are multiples of 4; tensors of 1- and 2-byte elements do not. One invocation per
 * destination word merges the source bytes into it, keeping the destination's other bytes.
 */
const SHADER = /* wgsl */ `
struct Params { dstOffset: u32, srcOffset: u32, count: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

fn srcByte(i: u32) -> u32 {
  let a = p.srcOffset + i;
  return (src[a >> 2u] >> ((a & 3u) * 8u)) & 0xffu;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let word = (p.dstOffset >> 2u) + id.x;
  let end = p.dstOffset + p.count;
  if (word * 4u >= end) { return; }
  var value = dst[word];
  for (var b = 0u; b < 4u; b++) {
    let at = word * 4u + b;
    if (at >= p.dstOffset && at < end) {
      value = (value & ~(0xffu << (b * 8u))) | (srcByte(at - p.dstOffset) << (b * 8u));
    }
  }
  dst[word] = value;
}`;

/**
 * Bytes one dispatch copies at most: 65,535 workgroups of 64 words hold the chunk's words plus the two that a
 * misaligned start and the spare invocation of `#dispatch` add.
 */
const MAX_DISPATCH_BYTES = (65_535 * 64 - 2) * 4;

export class ByteCopyKernel {
  #pipeline: GPUComputePipeline | undefined;
  readonly #params: GPUBuffer;

  constructor(
    private readonly device: GPUDevice,
    private readonly bindingAlignment: number,
    /** Submits without starting a submit epoch (Note [Submit epochs] in SubmitEpochs.ts). */
    private readonly submit: (buffers: Iterable<GPUCommandBuffer>) => void,
  ) {
    this.#params = device.createBuffer({ size: 16, usage: 0x0040 | 0x0008, label: 'stowage byte-copy params' });
  }

  /**
   * Copies `byteLength` bytes from `src[srcOffset…]` to `dst[dstOffset…]`; `src` and `dst` must be different
   * buffers with STORAGE usage. Each chunk of up to 16 MiB is one submit (the params buffer is rewritten per
   * chunk, in queue order).
   */
  copy(dst: GPUBuffer, dstOffset: number, src: GPUBuffer, srcOffset: number, byteLength: number): void {
    for (let done = 0; done < byteLength; done += MAX_DISPATCH_BYTES) {
      const n = Math.min(MAX_DISPATCH_BYTES, byteLength - done);
      this.#dispatch(dst, dstOffset + done, src, srcOffset + done, n);
    }
  }

  #dispatch(dst: GPUBuffer, dstOffset: number, src: GPUBuffer, srcOffset: number, n: number): void {
    const a = this.bindingAlignment;
    const dstStart = Math.floor(dstOffset / a) * a;
    const srcStart = Math.floor(srcOffset / a) * a;
    const dstSize = Math.min(dst.size - dstStart, Math.ceil((dstOffset + n - dstStart) / 4) * 4);
    const srcSize = Math.min(src.size - srcStart, Math.ceil((srcOffset + n - srcStart) / 4) * 4);
    this.device.queue.writeBuffer(this.#params, 0, new Uint32Array([dstOffset - dstStart, srcOffset - srcStart, n, 0]));
    const pipeline = this.#pipelineOnce();
    const bindGroup = this.device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: src, offset: srcStart, size: srcSize } },
        { binding: 1, resource: { buffer: dst, offset: dstStart, size: dstSize } },
        { binding: 2, resource: { buffer: this.#params } },
      ],
    });
    const encoder = this.device.createCommandEncoder({ label: 'stowage byte copy' });
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    const words = Math.ceil(((dstOffset - dstStart) % 4 + n) / 4) + 1;
    pass.dispatchWorkgroups(Math.ceil(words / 64));
    pass.end();
    this.submit([encoder.finish()]);
  }

  #pipelineOnce(): GPUComputePipeline {
    this.#pipeline ??= this.device.createComputePipeline({
      label: 'stowage byte copy',
      layout: 'auto',
      compute: { module: this.device.createShaderModule({ code: SHADER, label: 'stowage byte copy' }), entryPoint: 'main' },
    });
    return this.#pipeline;
  }

  dispose(): void {
    this.#params.destroy();
  }
}
