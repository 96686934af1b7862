import { BackendUnavailableError, InvalidArgumentError } from '@stowage/core';
import { checkEnum, checkOptions } from '@stowage/core/plugin-kit';
import { withDawnLogCaptured } from './DawnLog.js';

export interface OpenWebGpuOptions {
  /** Use this device (the caller owns it). */
  readonly device?: GPUDevice;
  readonly adapterOptions?: GPURequestAdapterOptions;
  /**
   * Node only: Dawn backends to try, in order. Default: `['vulkan', 'vulkan-swiftshader', 'opengles']` —
   * the system's Vulkan drivers, then the SwiftShader driver Debian's chromium package ships, then OpenGL ES
   * on Mesa (EGL surfaceless, compatibility feature level).
   */
  readonly backends?: readonly NodeBackend[];
}

export type NodeBackend = 'vulkan' | 'vulkan-swiftshader' | 'opengles' | 'default';

const NODE_BACKENDS: readonly NodeBackend[] = ['vulkan', 'vulkan-swiftshader', 'opengles', 'default'];

/** The keys of {@link OpenWebGpuOptions}. */
export const OPEN_WEBGPU_OPTION_KEYS = ['device', 'adapterOptions', 'backends'] as const;

/**
 * Checks the values of the options that open a device (not their keys: the plugin's options hold more).
 * @throws InvalidArgumentError for a `device` that is not a GPUDevice, `adapterOptions` that are not an object, or
 * `backends` that is not a list of known backends
 */
export function checkOpenWebGpuOptions(options: OpenWebGpuOptions): void {
  const device: unknown = options.device;
  if (device !== undefined && (typeof device !== 'object' || device === null || typeof (device as GPUDevice).createBuffer !== 'function')) {
    throw new InvalidArgumentError('options.device', device, 'a GPUDevice (or nothing, to open one)');
  }
  checkOptions('options.adapterOptions', options.adapterOptions);
  const backends: unknown = options.backends;
  if (backends === undefined) return;
  if (!Array.isArray(backends) || backends.length === 0) {
    throw new InvalidArgumentError('options.backends', backends, `a non-empty list of ${NODE_BACKENDS.map((b) => JSON.stringify(b)).join(', ')}`);
  }
  backends.forEach((backend, i) => checkEnum(`options.backends[${i}]`, backend, NODE_BACKENDS));
}

/** A device and what must stay alive with it. */
export interface WebGpuContext {
  readonly device: GPUDevice;
  readonly adapterInfo: string;
  /** Node: the `webgpu` package's GPU object; the process crashes if it is collected before the device. */
  readonly keepAlive: unknown;
  /** True when this call created the device (and `dispose` of the allocator may destroy it). */
  readonly owned: boolean;
}

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

/**
 * Opens a WebGPU device: the given one, `navigator.gpu` in a browser, or Dawn through the `webgpu` package in
 * Node, trying software paths when no hardware adapter exists. Requests the adapter's maximum buffer limits and
 * WebGPU's core default limits where the adapter has them (Note [Limits a device asks for]). In Node, Dawn's
 * warnings about the backends it tried go into the error, not to stderr (Note [Dawn's log while opening an adapter]).
 * @throws BackendUnavailableError naming what is missing when no adapter is found
 * @throws InvalidArgumentError (as a rejection) for options that are not an object, an unknown key (naming the
 * nearest known one) or a bad value (see {@link checkOpenWebGpuOptions})
 */
export async function openWebGpuDevice(given: OpenWebGpuOptions = {}): Promise<WebGpuContext> {
  const options = checkOptions('options', given, OPEN_WEBGPU_OPTION_KEYS);
  checkOpenWebGpuOptions(options);
  if (options.device) return { device: options.device, adapterInfo: 'caller-provided device', keepAlive: undefined, owned: false };
  const navigatorGpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  if (navigatorGpu) {
    const adapter = await navigatorGpu.requestAdapter(options.adapterOptions);
    if (!adapter) throw new BackendUnavailableError('navigator.gpu returned no WebGPU adapter (in Chromium, start it with --enable-unsafe-webgpu).');
    return { device: await requestDevice(adapter), adapterInfo: describe(adapter), keepAlive: undefined, owned: true };
  }
  if (typeof process === 'undefined' || !process.versions?.node) {
    throw new BackendUnavailableError('This environment has no navigator.gpu and is not Node: no WebGPU implementation to use.');
  }
  let dawn: { create(flags: string[]): GPU; globals: object };
  try {
    dawn = (await import('webgpu')) as unknown as typeof dawn;
  } catch (error) {
    throw new BackendUnavailableError("The 'webgpu' package (Dawn for Node) could not be loaded; install it next to @stowage/allocator-webgpu.", { cause: error });
  }
  const tried: string[] = [];
  for (const backend of options.backends ?? ['vulkan', 'vulkan-swiftshader', 'opengles']) {
    const attempt = await tryBackend(dawn, backend, options.adapterOptions);
    if (attempt.context) return attempt.context;
    tried.push(attempt.why);
  }
  throw new BackendUnavailableError(
    `No WebGPU adapter in Node: ${tried.join('; ')}. For a software device install Debian's chromium and libvulkan1 (SwiftShader) or libegl1 libegl-mesa0 libgles2 (Mesa llvmpipe).`,
  );
}

async function tryBackend(
  dawn: { create(flags: string[]): GPU },
  backend: NodeBackend,
  adapterOptions: GPURequestAdapterOptions | undefined,
): Promise<{ context?: WebGpuContext; why: string }> {
  const env = process.env;
  const flags: string[] = [];
  let requestOptions: GPURequestAdapterOptions = { ...adapterOptions };
  if (backend === 'vulkan' || backend === 'vulkan-swiftshader') flags.push('backend=vulkan');
  if (backend === 'vulkan-swiftshader') {
    const { existsSync } = await import('node:fs');
    if (!existsSync(SWIFTSHADER_ICD)) return { why: `SwiftShader: ${SWIFTSHADER_ICD} not found (apt-get install chromium libvulkan1)` };
    env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  }
  if (backend === 'opengles') {
    flags.push('backend=opengles');
    env.EGL_PLATFORM ??= 'surfaceless';
    requestOptions = { ...requestOptions, featureLevel: 'compatibility' } as GPURequestAdapterOptions;
  }
  const { value, log } = await withDawnLogCaptured(async (): Promise<{ context?: WebGpuContext; why: string }> => {
    let gpu: GPU;
    try {
      gpu = dawn.create(flags);
    } catch (error) {
      return { why: `${backend}: ${(error as Error).message}` };
    }
    const adapter = await gpu.requestAdapter(requestOptions).catch(() => null);
    if (!adapter) return { why: `${backend}: no adapter` };
    const device = await requestDevice(adapter).catch((error: Error) => error);
    if (device instanceof Error) return { why: `${backend}: ${describe(adapter)} refused a device: ${device.message}` };
    return { context: { device, adapterInfo: `${backend}: ${describe(adapter)}`, keepAlive: gpu, owned: true }, why: '' };
  });
  if (value.context !== undefined || log.warnings.length === 0) return value;
  return { why: `${value.why} (Dawn: ${log.warnings.join('; ')})` };
}

// Note [Limits a device asks for]
// A device gets WebGPU's default limits unless it asks for more. On an adapter of the core feature level (Vulkan,
// SwiftShader) those defaults are the core ones; on Mesa's OpenGL ES, which Dawn offers only at the compatibility
// level, they are lower (128 invocations a workgroup, 4 storage buffers a stage), though the adapter itself allows
// more (1024 and 16 on llvmpipe). Programs written for WebGPU assume the core defaults: tfjs's kernels use
// workgroups of 256, and on that device fail validation ("Entry-point uses workgroup_size(256, 1, 1) that exceeds
// the maximum allowed (128, 128, 64)"). So the device asks for every limit up to its core default, where the
// adapter allows it, and for the adapter's whole buffer sizes (Stowage's segments). A limit the adapter has below
// the core default stays the adapter's: a program that needs it can read `device.limits`.
const CORE_DEFAULT_LIMITS: Readonly<Record<string, number>> = {
  maxTextureDimension1D: 8192,
  maxTextureDimension2D: 8192,
  maxTextureDimension3D: 2048,
  maxTextureArrayLayers: 256,
  maxBindGroups: 4,
  maxBindGroupsPlusVertexBuffers: 24,
  maxBindingsPerBindGroup: 1000,
  maxDynamicUniformBuffersPerPipelineLayout: 8,
  maxDynamicStorageBuffersPerPipelineLayout: 4,
  maxSampledTexturesPerShaderStage: 16,
  maxSamplersPerShaderStage: 16,
  maxStorageBuffersPerShaderStage: 8,
  maxStorageTexturesPerShaderStage: 4,
  maxUniformBuffersPerShaderStage: 12,
  maxUniformBufferBindingSize: 65536,
  maxVertexBuffers: 8,
  maxVertexAttributes: 16,
  maxVertexBufferArrayStride: 2048,
  maxInterStageShaderVariables: 16,
  maxColorAttachments: 8,
  maxColorAttachmentBytesPerSample: 32,
  maxComputeWorkgroupStorageSize: 16384,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupSizeX: 256,
  maxComputeWorkgroupSizeY: 256,
  maxComputeWorkgroupSizeZ: 64,
  maxComputeWorkgroupsPerDimension: 65535,
};

/** The limits a device asks its adapter for (Note [Limits a device asks for]). */
export function requiredLimitsOf(adapterLimits: GPUSupportedLimits): Record<string, number> {
  const available = adapterLimits as unknown as Record<string, number | undefined>;
  const required: Record<string, number> = {};
  for (const [name, coreDefault] of Object.entries(CORE_DEFAULT_LIMITS)) {
    const offered = available[name];
    if (typeof offered === 'number') required[name] = Math.min(offered, coreDefault);
  }
  required['maxBufferSize'] = adapterLimits.maxBufferSize;
  required['maxStorageBufferBindingSize'] = adapterLimits.maxStorageBufferBindingSize;
  return required;
}

async function requestDevice(adapter: GPUAdapter): Promise<GPUDevice> {
  return adapter.requestDevice({ requiredLimits: requiredLimitsOf(adapter.limits) });
}

function describe(adapter: GPUAdapter): string {
  const info = (adapter as GPUAdapter & { info?: GPUAdapterInfo }).info;
  return [info?.vendor, info?.architecture, info?.device, info?.description].filter(Boolean).join(' ') || 'adapter';
}
