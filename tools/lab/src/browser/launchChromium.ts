import { existsSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { chromium } from 'playwright-core';

/** Debian's chromium package (which also ships the SwiftShader Vulkan driver Dawn uses in Node). */
export const CHROMIUM_PATH = '/usr/lib/chromium/chromium';

// Note [WebGPU in headless Chromium without a GPU]
// With --enable-unsafe-webgpu, Chromium 156 on a machine without a GPU answers requestAdapter() with its
// SwiftShader adapter (vendor 'google', architecture 'swiftshader', isFallbackAdapter true, maxBufferSize 1 GiB).
// Without the flag it answers null ("No available adapters."). --use-webgpu-adapter=swiftshader,
// --use-vulkan=swiftshader, --use-angle=swiftshader and --enable-features=Vulkan changed nothing here, so they are
// left out. The remaining flags keep the browser off the network: the server it talks to is on loopback.
const CHROMIUM_ARGS = [
  '--enable-unsafe-webgpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** True when Chromium is installed where `launchChromium` looks for it. */
export function hasChromium(): boolean {
  return existsSync(CHROMIUM_PATH);
}

/**
 * Launches headless Chromium with WebGPU enabled (Note [WebGPU in headless Chromium without a GPU]); without a
 * sandbox when running as root, where Chromium refuses to start with one.
 */
export function launchChromium(): Promise<Browser> {
  const asRoot = process.getuid?.() === 0;
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: asRoot ? [...CHROMIUM_ARGS, '--no-sandbox'] : CHROMIUM_ARGS,
    timeout: 30_000,
  });
}
