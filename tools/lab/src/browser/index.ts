// @stowage/lab/browser: the browser test harness, Node only, for tests: these modules import esbuild and
// playwright-core (optional peers of the lab; a package testing with it lists them as devDependencies). The lab's
// main entry never imports them.
export type { BrowserBundle, BrowserBundleOptions, ExternalImport } from './buildBrowserBundle.js';
export { buildBrowserBundle } from './buildBrowserBundle.js';
export { CHROMIUM_PATH, hasChromium, launchChromium } from './launchChromium.js';
export type { ChromiumRun, RunInChromiumOptions } from './runInChromium.js';
export { runInChromium } from './runInChromium.js';
export type { BrowserBundleServer } from './serveBrowserBundle.js';
export { serveBrowserBundle } from './serveBrowserBundle.js';
export { refuseSegments } from './refuseSegments.js';
export type { NeededLimits } from './sharedDevice.js';
export { deviceOrSkip, missingLimits, ownDeviceOrSkip, sharedDevice } from './sharedDevice.js';
export { DeviceMemoryCounter } from './DeviceMemoryCounter.js';
