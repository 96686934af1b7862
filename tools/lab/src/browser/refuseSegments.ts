/**
 * Makes `device` refuse a segment (a `mappedAtCreation` buffer, as the WebGPU backend creates them) with the
 * RangeError Dawn throws when it cannot back one, whenever `refuse(size)` says so (Note [The device says no] in
 * @stowage/allocator-webgpu's WebGpuMemoryBackend.ts), for tests of refusals.
 */
export function refuseSegments(device: GPUDevice, refuse: (size: number) => boolean): void {
  const createBuffer = device.createBuffer.bind(device);
  Object.defineProperty(device, 'createBuffer', {
    configurable: true,
    value: (descriptor: GPUBufferDescriptor): GPUBuffer => {
      if (descriptor.mappedAtCreation === true && refuse(descriptor.size)) throw new RangeError(`injected: the device cannot back ${descriptor.size} bytes`);
      return createBuffer(descriptor);
    },
  });
}
