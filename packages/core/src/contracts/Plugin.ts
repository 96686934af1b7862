import type { DependencyContainer } from 'tsyringe';

/**
 * A package's contribution to a runtime: registers providers in the runtime's own child container. Made by a
 * package's factory (`cpu()`, `webgpu()`, `lms()`, `cow()`); registers nothing at import time.
 */
export interface Plugin {
  readonly name: string;
  register(container: DependencyContainer): void | Promise<void>;
}
