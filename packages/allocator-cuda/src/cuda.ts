import type { DependencyContainer } from 'tsyringe';
import type { CachingAllocatorOptions, Plugin } from '@stowage/core';
import type { DeviceAllocatorOptions, DeviceAllocatorSpec } from '@stowage/core/plugin-kit';
import { BackendUnavailableError, BlockInspector, IpcExporter, Pager, InvalidArgumentError } from '@stowage/core';
import { AllocatorFactory, checkBoolean, createDeviceAllocator, registerDeviceAllocator, resolveDeviceOptions } from '@stowage/core/plugin-kit';
import { CudaMemoryBackend } from './backend/CudaMemoryBackend.js';
import { CudaStreams } from './backend/CudaStreams.js';
import { CudaAllocator } from './CudaAllocator.js';
import type { AllocatorConf } from './config/AllocatorConfValues.js';
import { parseAllocatorConf, readAllocatorConfFromEnv } from './config/AllocatorConf.js';
import { allocatorConfEngineOptions } from './config/allocatorConfEngineOptions.js';
import { CudaDriver } from './driver/CudaDriver.js';
import { CudaError } from './driver/CudaError.js';

export interface CudaOptions extends DeviceAllocatorOptions {
  /**
   * Where to load libcuda from: a path, or paths tried in order. Default: `STOWAGE_LIBCUDA` when set, otherwise
   * the usual places (`DEFAULT_LIBCUDA_PATHS`).
   */
  readonly libcuda?: string | readonly string[];
  /**
   * The allocator's configuration as PyTorch takes it (`'expandable_segments:True,max_split_size_mb:128'`: same
   * keys, defaults and error messages; see `parseAllocatorConf`). Default: `PYTORCH_ALLOC_CONF` or
   * `PYTORCH_CUDA_ALLOC_CONF` from the environment. The engine options it sets sit under explicit options
   * (`maxSplitSize`, `limit`, …), which win; keys the engine does not act on are reported once as a warning.
   */
  readonly allocConf?: string;
  /**
   * Create expandable segments' memory exportable as POSIX file descriptors, so that any block can be sent to
   * another process (`exportIpc`). Default true; false where the driver refuses that handle type (some containers)
   * or nothing is shared (on the stand-in libcuda it then needs no file descriptor per 2 MiB page).
   */
  readonly shareableSegments?: boolean;
}

type CudaDeviceOption = 'libcuda' | 'allocConf' | 'shareableSegments';

/** The configuration string's engine options, under the caller's; warns about keys the engine does not act on. */
function confEngineOptions(text: string | undefined): { readonly conf: AllocatorConf; readonly engine: CachingAllocatorOptions } {
  const conf = text === undefined ? readAllocatorConfFromEnv() : parseAllocatorConf(text);
  for (const { key, reason } of conf.notApplied) {
    process.emitWarning(`${key} in the CUDA allocator configuration is accepted but not acted on: ${reason}`, { code: 'STOWAGE_ALLOC_CONF' });
  }
  return { conf, engine: allocatorConfEngineOptions(conf) };
}

/** The option keys of the CUDA plugin, for checking options before the driver is loaded. */
const CUDA_OPTIONS = {
  deviceType: 'cuda',
  deviceOptions: ['libcuda', 'allocConf', 'shareableSegments'] as readonly CudaDeviceOption[],
  checkDeviceOptions: (own: Pick<CudaOptions, CudaDeviceOption>) => {
    checkBoolean('options.shareableSegments', own.shareableSegments);
    if (own.allocConf !== undefined && typeof own.allocConf !== 'string') {
      throw new InvalidArgumentError('options.allocConf', own.allocConf, "a configuration string such as 'expandable_segments:True,max_split_size_mb:128'");
    }
    if (own.allocConf !== undefined) parseAllocatorConf(own.allocConf); // PyTorch's message for a bad key or value, now
    const paths = own.libcuda;
    if (paths === undefined) return;
    const list = typeof paths === 'string' ? [paths] : paths;
    if (!Array.isArray(list) || list.length === 0 || !list.every((p) => typeof p === 'string' && p !== '')) {
      throw new InvalidArgumentError('options.libcuda', paths, 'a path to libcuda, or a non-empty array of paths tried in order');
    }
  },
} as const;

/** A loaded and initialised driver, and how many devices it has. */
export interface OpenedCudaDriver {
  readonly driver: CudaDriver;
  readonly deviceCount: number;
}

/**
 * Loads libcuda (see {@link CudaOptions.libcuda}), initialises it and counts its devices.
 * @throws BackendUnavailableError when no library loads, or when the driver has no usable device (cuInit fails, as
 * it does with CUDA_ERROR_NO_DEVICE on a machine with a driver but no GPU)
 */
export function openCudaDriver(options: Pick<CudaOptions, 'libcuda'> = {}): OpenedCudaDriver {
  const paths = options.libcuda === undefined ? undefined : typeof options.libcuda === 'string' ? [options.libcuda] : options.libcuda;
  const driver = CudaDriver.open(paths === undefined ? {} : { paths });
  try {
    driver.init();
    return { driver, deviceCount: driver.deviceCount() };
  } catch (error) {
    if (!(error instanceof CudaError)) throw error;
    throw new BackendUnavailableError(`The CUDA driver at ${driver.path} loaded but cannot be used: ${error.message}`, { cause: error });
  }
}

/**
 * CUDA as a device plugin serves it: the driver's devices, `cuda:0` … `cuda:n-1`, sharing one stream table. Each
 * allocator is the caching engine over a CudaMemoryBackend.
 */
function cudaDevice(opened: OpenedCudaDriver, allocConf: string | undefined): DeviceAllocatorSpec<CudaOptions, CudaDeviceOption, CudaAllocator> {
  const streams = new CudaStreams(opened.driver);
  const configured = confEngineOptions(allocConf);
  return {
    ...CUDA_OPTIONS,
    deviceCount: opened.deviceCount,
    provideServices(allocator, provide) {
      provide(BlockInspector, allocator.engine);
      provide(Pager, allocator.pager);
      provide(IpcExporter, allocator);
    },
    create(device, engine, own) {
      const backend = new CudaMemoryBackend({
        driver: opened.driver,
        device,
        streams,
        ...(own.shareableSegments === undefined ? {} : { shareableSegments: own.shareableSegments }),
      });
      try {
        return new CudaAllocator(backend, { ...configured.engine, ...engine }, { allocConf: configured.conf.text });
      } catch (error) {
        backend.dispose();
        throw error;
      }
    },
  };
}

/**
 * Makes the allocator of one CUDA device outside a runtime (no reclaimers); same options and budget as `cuda()`.
 * @throws InvalidArgumentError for a bad option; BackendUnavailableError when the driver cannot be loaded or the
 * device does not exist
 */
export function createCudaAllocator(options: CudaOptions = {}, index = 0): CudaAllocator {
  const { own } = resolveDeviceOptions(CUDA_OPTIONS, options);
  return createDeviceAllocator(cudaDevice(openCudaDriver(own), own.allocConf), options, index);
}

/**
 * Loads the driver and registers the allocator factory for `cuda:*` through core's `registerDeviceAllocator`.
 * Without a usable driver the runtime still composes: the factory then throws the BackendUnavailableError that says
 * what was looked for and where, on first use of a CUDA device.
 * @throws InvalidArgumentError for a bad option
 */
export function registerCudaAllocator(container: DependencyContainer, options: CudaOptions = {}): void {
  const { own } = resolveDeviceOptions(CUDA_OPTIONS, options);
  let opened: OpenedCudaDriver;
  try {
    opened = openCudaDriver(own);
  } catch (error) {
    if (!(error instanceof BackendUnavailableError)) throw error;
    const unavailable: AllocatorFactory = {
      deviceType: 'cuda',
      create: () => {
        throw error;
      },
    };
    container.register(AllocatorFactory, { useValue: unavailable });
    return;
  }
  registerDeviceAllocator(container, cudaDevice(opened, own.allocConf), options);
}

/**
 * The CUDA allocator plugin: `createRuntime({ plugins: [cuda({ limit: { fraction: 0.9 } })] })`.
 * @throws InvalidArgumentError for a bad option, at once
 */
export function cuda(options: CudaOptions = {}): Plugin {
  resolveDeviceOptions(CUDA_OPTIONS, options);
  return { name: 'cuda', register: (container) => registerCudaAllocator(container, options) };
}
