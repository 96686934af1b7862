import { spawnSync } from 'node:child_process';
import { expect } from 'chai';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';

const distIndex = new URL('../dist/index.js', import.meta.url).href;

/** Runs `script` (an ES module) in a fresh Node with `env` added; its exit status, stdout and stderr. */
function runChild(script: string, env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000 });
  return { status: child.status, stdout: child.stdout, stderr: child.stderr };
}

/** A `navigator.gpu` whose one adapter has `limits`, recording the descriptor each requestDevice gets. */
function fakeGpu(limits: Record<string, number>): { gpu: GPU; requested: GPUDeviceDescriptor[] } {
  const requested: GPUDeviceDescriptor[] = [];
  const adapter = {
    limits,
    info: { vendor: 'fake', architecture: '', device: '', description: 'an adapter of the compatibility level' },
    requestDevice: (descriptor: GPUDeviceDescriptor) => {
      requested.push(descriptor);
      return Promise.resolve({ createBuffer: () => undefined } as unknown as GPUDevice);
    },
  };
  return { gpu: { requestAdapter: () => Promise.resolve(adapter) } as unknown as GPU, requested };
}

describe('openWebGpuDevice', function () {
  this.timeout(60_000);

  it("asks for WebGPU's core default limits where the adapter has them, the adapter's own below them, and its whole buffer sizes", async () => {
    // Mesa's OpenGL ES adapter (compatibility level) allows 1024 invocations, but its device defaults to 128:
    // tfjs's workgroups of 256 then fail validation.
    const { gpu, requested } = fakeGpu({
      maxComputeInvocationsPerWorkgroup: 1024,
      maxComputeWorkgroupSizeX: 1024,
      maxComputeWorkgroupStorageSize: 8192,
      maxStorageBuffersPerShaderStage: 16,
      maxBufferSize: 2 ** 31,
      maxStorageBufferBindingSize: 2 ** 27,
    });
    const before = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
    Object.defineProperty(globalThis, 'navigator', { value: { gpu }, configurable: true, writable: true });
    try {
      const context = await openWebGpuDevice();
      expect(context.adapterInfo).to.contain('compatibility level');
    } finally {
      if (before) Object.defineProperty(globalThis, 'navigator', before);
      else delete (globalThis as { navigator?: unknown }).navigator;
    }
    expect(requested.map((d) => d.requiredLimits)).to.deep.equal([
      {
        maxComputeInvocationsPerWorkgroup: 256,
        maxComputeWorkgroupSizeX: 256,
        maxComputeWorkgroupStorageSize: 8192,
        maxStorageBuffersPerShaderStage: 8,
        maxBufferSize: 2 ** 31,
        maxStorageBufferBindingSize: 2 ** 27,
      },
    ]);
  });

  it("keeps Dawn's warnings about a backend that gave no adapter out of stderr, and names them in the error", function () {
    if (process.platform !== 'linux') {
      console.log(`    skipped: Dawn's backend-selection output is checked on Linux only (this is ${process.platform})`);
      this.skip();
    }
    // The Vulkan loader with every driver disabled: Dawn warns "vkCreateInstance: Found no drivers!" (without
    // libvulkan1 at all: "Couldn't load Vulkan"), each with a source path on the machine that built Dawn.
    const child = runChild(
      `const { openWebGpuDevice } = await import(${JSON.stringify(distIndex)});
       await openWebGpuDevice({ backends: ['vulkan'] }).then(() => console.log('OPENED'), (e) => console.log('ERROR ' + e.name + ': ' + e.message));`,
      { VK_LOADER_DRIVERS_DISABLE: '*' },
    );
    expect(child.status, child.stderr).to.equal(0);
    expect(child.stdout).to.match(/^ERROR BackendUnavailableError: No WebGPU adapter in Node: vulkan: no adapter \(Dawn: .+\)/);
    expect(child.stderr, 'nothing of Dawn on stderr').to.not.match(/Warning:|third_party\/dawn/);
  });

  it('prints no warning of Dawn when it opens a device after trying backends that gave none', function () {
    const child = runChild(
      `const { openWebGpuDevice } = await import(${JSON.stringify(distIndex)});
       const context = await openWebGpuDevice().catch((e) => { console.log('NO-ADAPTER ' + e.message); process.exit(0); });
       console.log('OPENED ' + context.adapterInfo);
       context.device.destroy();
       process.exit(0);`,
    );
    if (child.stdout.startsWith('NO-ADAPTER')) {
      console.log(`    skipped: no WebGPU adapter in the child — ${child.stdout.trim()}`);
      this.skip();
    }
    expect(child.stdout, child.stderr).to.match(/^OPENED /);
    expect(child.stderr).to.not.match(/Warning:|third_party\/dawn/);
  });

  it("passes Dawn's output through unfiltered with STOWAGE_DAWN_LOG=1", function () {
    if (process.platform !== 'linux') {
      console.log(`    skipped: Dawn's backend-selection output is checked on Linux only (this is ${process.platform})`);
      this.skip();
    }
    const child = runChild(
      `const { openWebGpuDevice } = await import(${JSON.stringify(distIndex)});
       await openWebGpuDevice({ backends: ['vulkan'] }).catch(() => undefined);`,
      { VK_LOADER_DRIVERS_DISABLE: '*', STOWAGE_DAWN_LOG: '1' },
    );
    expect(child.stderr).to.match(/Warning: /);
  });

  it("writes back what is not a Dawn warning, as it came, and keeps each warning's context without its source path", async () => {
    // Not exported: the module itself, from the build.
    const { splitDawnLog } = (await import(new URL('../dist/DawnLog.js', import.meta.url).href)) as {
      splitDawnLog(text: string, passOn: (rest: string) => void): { readonly warnings: readonly string[] };
    };
    const passed: string[] = [];
    const log = splitDawnLog(
      [
        'error: XDG_RUNTIME_DIR is invalid or not set in the environment.',
        'Warning: Vulkan shaderUniform*ArrayDynamicIndexing required.',
        ' - While initializing adapter (backend=BackendType::Vulkan)',
        '    at InitializeImpl (/home/runner/work/node-webgpu/node-webgpu/third_party/dawn/src/dawn/native/vulkan/PhysicalDeviceVk.cpp:257)',
        '',
        'Error: a real one',
        '',
      ].join('\n'),
      (rest) => passed.push(rest),
    );
    expect(log.warnings).to.deep.equal(['Vulkan shaderUniform*ArrayDynamicIndexing required. — While initializing adapter (backend=BackendType::Vulkan)']);
    expect(passed).to.deep.equal(['error: XDG_RUNTIME_DIR is invalid or not set in the environment.\nError: a real one\n']);
  });
});
