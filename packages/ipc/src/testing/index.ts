// What the package's tests, benches and other packages' tests use beneath the user's API (`@stowage/ipc/testing`):
// the shared-memory files and process syscalls, the ref-counter files and their client, the consumer's mappings and
// the descriptor check. Programs use the main entry.
export { SharedMappings } from '../consumer/SharedMappings.js';
export type { SharedMappingsOptions, SharedObject } from '../consumer/SharedMappings.js';
export { RefCounterClient } from '../refcount/RefCounterClient.js';
export type { RefCounterClientOptions } from '../refcount/RefCounterClient.js';
export { RefCounterFiles } from '../refcount/RefCounterFiles.js';
export type { RefCounterFilesOptions } from '../refcount/RefCounterFiles.js';
export { isProcessAlive } from '../shm/isProcessAlive.js';
export { pidfdGetfd, pidfdOpen } from '../shm/pidfd.js';
export { SharedMemoryFile } from '../shm/SharedMemoryFile.js';
export type { CreateSharedMemoryOptions } from '../shm/SharedMemoryFile.js';
export { checkStorageDescriptor } from '../wire/StorageDescriptor.js';
