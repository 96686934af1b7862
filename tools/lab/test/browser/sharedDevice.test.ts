import { expect } from 'chai';
import { missingLimits } from '@stowage/lab/browser';

/** A device with these limits and nothing else (all missingLimits reads). */
const deviceWith = (limits: Record<string, number>): GPUDevice => ({ limits }) as unknown as GPUDevice;

describe('missingLimits (the skip check of WebGPU tests)', () => {
  it('names each limit the device has below what a test needs, with the value it has', () => {
    const device = deviceWith({ maxComputeWorkgroupSizeX: 128, maxComputeInvocationsPerWorkgroup: 256, maxStorageBuffersPerShaderStage: 4 });
    expect(missingLimits(device, { maxComputeWorkgroupSizeX: 256, maxComputeInvocationsPerWorkgroup: 256, maxStorageBuffersPerShaderStage: 8 })).to.deep.equal([
      'maxComputeWorkgroupSizeX 256 (this device: 128)',
      'maxStorageBuffersPerShaderStage 8 (this device: 4)',
    ]);
  });

  it('counts a limit the device does not know as missing, and an alignment limit as met when it is no larger', () => {
    const device = deviceWith({ minStorageBufferOffsetAlignment: 256, minUniformBufferOffsetAlignment: 64 });
    expect(missingLimits(device, { minStorageBufferOffsetAlignment: 256, minUniformBufferOffsetAlignment: 32, maxComputeWorkgroupSizeZ: 64 })).to.deep.equal([
      'minUniformBufferOffsetAlignment 32 (this device: 64)',
      'maxComputeWorkgroupSizeZ 64 (this device: unknown)',
    ]);
  });

  it('finds nothing missing when a test needs nothing', () => {
    expect(missingLimits(deviceWith({}), {})).to.deep.equal([]);
  });
});
