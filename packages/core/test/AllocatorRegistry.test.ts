import { expect } from 'chai';
import type { Allocator } from '@stowage/core';
import type { DependencyContainer } from 'tsyringe';
import { createRuntime, DisposedError, InvalidArgumentError, wrapAllocators } from '@stowage/core';
import { AllocatorFactory } from '@stowage/core/plugin-kit';
import { thrownBy } from './engine/helpers.js';

describe('AllocatorRegistry#get', () => {
  it('disposes the allocator its factory made when a decorator throws', async () => {
    let made: Allocator | undefined;
    await using rt = await createRuntime({
      plugins: [
        wrapAllocators('cpu', (a) => (made = a)),
        wrapAllocators('cpu', () => {
          throw new Error('wrap failed');
        }),
      ],
    });
    expect(() => rt.allocator('cpu')).to.throw(/wrap failed/);
    expect(() => made!.allocate(8), 'the factory-made allocator leaks').to.throw(DisposedError);
  });
});

describe('AllocatorRegistry (what plugins hand back)', () => {
  const factories: { name: string; create: () => unknown }[] = [
    { name: 'null', create: () => null },
    { name: 'a plain object', create: () => ({ device: { type: 'cpu', index: 0 } }) },
  ];
  for (const { name, create } of factories) {
    it(`refuses an AllocatorFactory whose create returns ${name}, naming the factory`, async () => {
      const factory = { deviceType: 'cpu', create } as unknown as AllocatorFactory;
      await using rt = await createRuntime({ plugins: [{ name: 'broken', register: (c) => void c.register(AllocatorFactory, { useValue: factory }) }] });
      const error = thrownBy(() => rt.storage(8));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(/^the value the AllocatorFactory for 'cpu' \(create\(cpu:0\)\) returned must be an Allocator/);
    });
  }

  it('refuses a factory whose deviceType is not a device type when the runtime is made, naming it', async () => {
    for (const deviceType of ['NPU X', 'Cuda', 'cuda:0', '']) {
      const factory = { deviceType, create: () => null } as unknown as AllocatorFactory;
      const plugin = { name: 'npu', register: (c: DependencyContainer) => void c.register(AllocatorFactory, { useValue: factory }) };
      const error = await createRuntime({ plugins: [plugin] }).catch((e: unknown) => e);
      expect(error, deviceType).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.match(/^the registered AllocatorFactory \[\d+\]\.deviceType$/);
    }
  });

  it('refuses a wrapAllocators wrapper that returns null, naming the wrapper and disposing the allocator it was given', async () => {
    let given: Allocator | undefined;
    await using rt = await createRuntime({
      plugins: [wrapAllocators('cpu', (a) => ((given = a), null as unknown as Allocator))],
    });
    expect(() => rt.storage(8)).to.throw(InvalidArgumentError, /AllocatorDecorator for 'cpu' \(a wrapAllocators wrapper\)/);
    expect(() => given!.allocate(8)).to.throw(DisposedError);
  });

  const wrappers: { name: string; args: unknown[]; argument: string }[] = [
    { name: 'a wrapper that is not a function', args: ['cpu', { wrap() {} }], argument: 'wrap' },
    { name: 'a device type that is not a string', args: [null, (a: Allocator) => a], argument: 'deviceType' },
  ];
  for (const { name, args, argument } of wrappers) {
    it(`wrapAllocators refuses ${name} at once`, () => {
      const error = thrownBy(() => (wrapAllocators as (...a: unknown[]) => unknown)(...args));
      expect(error).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
    });
  }
});
