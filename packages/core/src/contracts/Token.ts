import type { DependencyContainer } from 'tsyringe';

import { BackendUnavailableError } from '../errors/BackendUnavailableError.js';

/**
 * An injection token that carries the type it resolves to. Interfaces and their tokens share one name:
 * `export interface Allocator {…}` and `export const Allocator: Token<Allocator> = Symbol(…)`.
 */
export type Token<T> = symbol & { readonly __type?: T };

/**
 * Resolves a token with its type.
 * @throws BackendUnavailableError when nothing is registered under the token (the plugin that provides it is not
 *   among the runtime's plugins); what the registration's factory throws
 */
export function resolve<T>(container: DependencyContainer, token: Token<T>): T {
  if (!container.isRegistered(token, true)) {
    const name = typeof token === 'symbol' ? (token.description ?? String(token)) : String(token);
    throw new BackendUnavailableError(`Nothing is registered under ${name} in this runtime: add the plugin that provides it to createRuntime({ plugins }) (for instance lms() for LmsController, ipc() for Ipc).`);
  }
  return container.resolve<T>(token);
}

/** Resolves every registration of a multi-registered token, in registration order; [] when none. */
export function resolveAll<T>(container: DependencyContainer, token: Token<T>): T[] {
  return container.isRegistered(token, true) ? container.resolveAll<T>(token) : [];
}
