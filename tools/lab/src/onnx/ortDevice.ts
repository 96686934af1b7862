/** Limits onnxruntime-web's kernels need beyond WebGPU's core defaults (the silero LSTM binds 9 storage buffers). */
export const ORT_LIMITS = ['maxStorageBuffersPerShaderStage', 'maxBufferSize', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize'] as const;

/** What a device's createBuffer made: calls, and the peak of live bytes of the buffers it made. */
export interface BufferCount {
  calls: number;
  liveBytes: number;
  peakBytes: number;
}

/**
 * Why onnxruntime-web cannot run on `gpu`, or undefined when it can: it asks for a core (not compatibility)
 * adapter, and silero's LSTM binds 9 storage buffers per stage.
 */
export async function ortUnavailable(gpu: GPU | undefined, adapterInfo = 'unknown'): Promise<string | undefined> {
  if (gpu === undefined || typeof (gpu as Partial<GPU>).requestAdapter !== 'function') return 'no dawn.node GPU object (these tests run in Node)';
  const adapter = await gpu.requestAdapter();
  if (adapter === null) return `no WebGPU adapter of the core feature level for onnxruntime-web (this device: ${adapterInfo})`;
  const storageBuffers = adapter.limits.maxStorageBuffersPerShaderStage;
  if (storageBuffers < 9) return `the WebGPU adapter lacks maxStorageBuffersPerShaderStage 9 (this adapter: ${storageBuffers})`;
  return undefined;
}

/**
 * `device`, its `queue.writeBuffer` copying views of shared memory first: dawn.node refuses them, and
 * onnxruntime-web's threaded WebAssembly builds pass them (measure 4 of issue 36, which a plain device needs too in
 * Node; the Stowage device does it itself). Returns `device`.
 */
export function copySharedUploads(device: GPUDevice): GPUDevice {
  const queue = device.queue;
  const writeBuffer = queue.writeBuffer.bind(queue);
  queue.writeBuffer = ((buffer: GPUBuffer, offset: number, data: ArrayBufferView | ArrayBufferLike, dataOffset = 0, size?: number) => {
    const view = ArrayBuffer.isView(data) ? data : undefined;
    const backing = view ? view.buffer : (data as ArrayBufferLike);
    if (!(backing instanceof SharedArrayBuffer)) return writeBuffer(buffer, offset, data as GPUAllowSharedBufferSource, dataOffset, size);
    const elementBytes = (view as unknown as { BYTES_PER_ELEMENT?: number } | undefined)?.BYTES_PER_ELEMENT ?? 1;
    const length = (view ? view.byteLength : backing.byteLength) / elementBytes;
    const bytes = (size ?? length - dataOffset) * elementBytes;
    return writeBuffer(buffer, offset, new Uint8Array(backing, (view?.byteOffset ?? 0) + dataOffset * elementBytes, bytes).slice());
  }) as GPUQueue['writeBuffer'];
  return device;
}

/**
 * Counts every buffer `device.createBuffer` makes and every destroy, in `count` (live and peak bytes). Returns
 * `device`.
 */
export function countBuffers(device: GPUDevice, count: BufferCount): GPUDevice {
  const createBuffer = device.createBuffer.bind(device);
  device.createBuffer = (descriptor: GPUBufferDescriptor) => {
    const buffer = createBuffer(descriptor);
    count.calls++;
    count.liveBytes += descriptor.size;
    count.peakBytes = Math.max(count.peakBytes, count.liveBytes);
    const destroy = buffer.destroy.bind(buffer);
    let destroyed = false;
    buffer.destroy = () => {
      if (!destroyed) count.liveBytes -= descriptor.size;
      destroyed = true;
      destroy();
    };
    return buffer;
  };
  return device;
}

/**
 * A device of its own on `gpu` with the adapter's limits (as onnxruntime-web asks for when it opens one), counting
 * its buffers (`countBuffers`) and copying uploads from shared memory (`copySharedUploads`).
 */
export async function ortDevice(gpu: GPU): Promise<{ device: GPUDevice; count: BufferCount }> {
  const adapter = await gpu.requestAdapter();
  if (adapter === null) throw new Error('ortDevice: no WebGPU adapter of the core feature level');
  const requiredLimits = Object.fromEntries(ORT_LIMITS.map((name) => [name, adapter.limits[name]]));
  const device = await adapter.requestDevice({ requiredLimits });
  const count: BufferCount = { calls: 0, liveBytes: 0, peakBytes: 0 };
  return { device: countBuffers(copySharedUploads(device), count), count };
}
