import type { NeededLimits } from '../browser/sharedDevice.js';

/**
 * What tfjs-backend-webgpu's kernels assume of a device: WebGPU's core defaults for compute (workgroups of 256
 * invocations along x, 16 KiB of workgroup memory, 8 storage buffers a stage). A device of the compatibility
 * feature level (Mesa's OpenGL ES) may have less; there tfjs's kernels fail validation ("Entry-point uses
 * workgroup_size(256, 1, 1) that exceeds the maximum allowed"), stock tfjs's as Stowage's, so a test that runs tfjs
 * checks these first (`deviceOrSkip(this, TFJS_LIMITS)`) and skips naming the limit. `openWebGpuDevice` asks for
 * them where the adapter has them.
 */
export const TFJS_LIMITS: NeededLimits = {
  maxComputeWorkgroupSizeX: 256,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupStorageSize: 16384,
  maxStorageBuffersPerShaderStage: 8,
};
