/**
 * Makes the WebGPU globals TensorFlow.js's WebGPU backend reads (`GPUBufferUsage`, `GPUMapMode`, `GPUBuffer` and
 * `GPUTexture` for its `instanceof` checks, `navigator.gpu` for its support check) exist in Node, from Dawn's (the
 * `webgpu` package); a browser has them already. Globals that exist are left as they are.
 * `gpu` is the GPU object the device came from (Dawn's in Node: `WebGpuContext.keepAlive`), or undefined.
 * @returns the names it defined
 */
export async function installWebGpuGlobals(gpu: unknown): Promise<string[]> {
  const defined: string[] = [];
  const global = globalThis as Record<string, unknown> & { navigator?: { gpu?: unknown } };
  if (typeof process !== 'undefined' && process.versions?.node && typeof global['GPUBufferUsage'] === 'undefined') {
    const dawn = (await import('webgpu')) as unknown as { globals: Record<string, unknown> };
    for (const [name, value] of Object.entries(dawn.globals)) {
      if (name in global) continue;
      global[name] = value;
      defined.push(name);
    }
  }
  if (global.navigator === undefined) {
    global.navigator = {};
    defined.push('navigator');
  }
  if (global.navigator.gpu === undefined && gpu !== undefined) {
    // Node: Dawn's GPU object. tfjs only checks that it exists; the backend runs on the runtime's device.
    global.navigator.gpu = gpu;
    defined.push('navigator.gpu');
  }
  return defined;
}
