import { expect } from 'chai';

import { InvalidArgumentError } from '@stowage/core';
import { checkStorageDescriptor } from '@stowage/ipc/testing';

const slot = { file: '/stowage-ipc-1-1', slot: 0, nonce: 5n };
const producer = { pid: 1, threadId: 0 };
const legacy = { kind: 'legacy', device: 0, handle: new Uint8Array(64), offset: 512, byteLength: 4096 };
const shareable = { kind: 'shareable', device: 1, pageBytes: 2 ** 21, fds: [20, 21], offset: 0, byteLength: 2 ** 22 };

describe('checkStorageDescriptor (CUDA memory)', () => {
  it('accepts a legacy export on cuda:0 and a shareable one on cuda:1', () => {
    checkStorageDescriptor({ device: 'cuda:0', memory: { kind: 'cuda', exported: legacy, byteOffset: 0 }, byteLength: 4096, slot, producer });
    checkStorageDescriptor({ device: 'cuda:1', memory: { kind: 'cuda', exported: shareable, byteOffset: 0 }, byteLength: 2 ** 22, slot, producer });
  });

  it('refuses malformed exports naming the field: wrong device, length, handle size, too few pages, host memory on a CUDA device', () => {
    const bad = (device: string, exported: unknown, byteLength: number, field: RegExp): void => {
      expect(() => checkStorageDescriptor({ device, memory: { kind: 'cuda', exported, byteOffset: 0 }, byteLength, slot, producer }))
        .to.throw(InvalidArgumentError, field);
    };
    bad('cuda:1', legacy, 4096, /exported\.device/);
    bad('cuda:0', legacy, 4095, /exported\.byteLength/);
    bad('cuda:0', { ...legacy, handle: new Uint8Array(3) }, 4096, /exported\.handle/);
    bad('cuda:1', { ...shareable, fds: [20] }, 2 ** 22, /exported\.fds/);
    bad('cuda:1', { ...shareable, fds: [-1, 2] }, 2 ** 22, /exported\.fds/);
    bad('cuda:0', { ...legacy, kind: 'ipc' }, 4096, /exported\.kind/);
    expect(() => checkStorageDescriptor({ device: 'cuda:0', memory: { kind: 'shm', name: '/x', byteOffset: 0 }, byteLength: 1, slot, producer })).to.throw(InvalidArgumentError, /memory/);
    expect(() => checkStorageDescriptor({ device: 'webgpu:0', memory: { kind: 'shm', name: '/x', byteOffset: 0 }, byteLength: 1, slot, producer })).to.throw(InvalidArgumentError, /device/);
  });
});
