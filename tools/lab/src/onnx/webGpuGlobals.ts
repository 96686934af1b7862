/**
 * Makes `gpu` the `navigator.gpu` of Node and Dawn's classes (GPUDevice, GPUBuffer, …) globals, as onnxruntime-web
 * (both its builds) and transformers.js look for them before they start WebGPU; leaves any that exist as they are.
 * Returns the undo: it removes exactly what it added.
 */
export async function installWebGpuGlobals(gpu: GPU): Promise<() => void> {
  const dawn = (await import('webgpu')) as unknown as { globals: Record<string, unknown> };
  const scope = globalThis as Record<string, unknown>;
  const undo: (() => void)[] = [];
  for (const [name, value] of Object.entries(dawn.globals)) {
    if (name in scope) continue;
    scope[name] = value;
    undo.push(() => delete scope[name]);
  }
  const hadNavigator = 'navigator' in scope;
  if (!hadNavigator) scope['navigator'] = {};
  const navigator = scope['navigator'] as Record<string, unknown>;
  if (navigator['gpu'] === undefined) {
    Object.defineProperty(navigator, 'gpu', { value: gpu, configurable: true });
    undo.push(() => delete navigator['gpu']);
  }
  if (!hadNavigator) undo.push(() => delete scope['navigator']);
  return () => {
    for (const step of undo.reverse()) step();
    undo.length = 0;
  };
}
