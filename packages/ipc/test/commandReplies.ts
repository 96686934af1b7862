/** A peer's answer to a numbered command: its value, or the error it threw (name, StowageError code, message). */
export interface Reply {
  readonly id: number;
  readonly value?: unknown;
  readonly error?: { name: string; code?: string; message: string };
}

/**
 * The test's side of a command channel to a peer (a worker or a child process): numbers each command, and settles
 * its promise when the reply with that number arrives. The peer answers id 0 once it is ready.
 */
export class CommandReplies {
  readonly #pending = new Map<number, (r: Reply) => void>();
  #id = 1;

  /** Resolves at the peer's ready reply (id 0). */
  ready(): Promise<void> {
    return new Promise((resolve) => this.#pending.set(0, () => resolve()));
  }

  /** Hands a reply that arrived to the command it answers. */
  settle(reply: Reply): void {
    this.#pending.get(reply.id)?.(reply);
    this.#pending.delete(reply.id);
  }

  /** Sends a command with `post(id)`; resolves to its value or rejects with { name, code, message }. */
  call<T>(post: (id: number) => void): Promise<T> {
    const id = this.#id++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, (r) => (r.error === undefined ? resolve(r.value as T) : reject(r.error)));
      post(id);
    });
  }
}
