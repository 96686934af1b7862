import type { ChildProcessByStdio } from 'node:child_process';
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';

import type { CounterSlot } from '@stowage/ipc';
import { SharedMemoryFile } from '@stowage/ipc/testing';

/** A counter slot as JSON carries it (the nonce as a decimal string). */
export interface WireSlot {
  readonly file: string;
  readonly slot: number;
  readonly nonce: string;
}

export const toWire = (s: CounterSlot): WireSlot => ({ file: s.file, slot: s.slot, nonce: String(s.nonce) });
export const fromWire = (s: WireSlot): CounterSlot => ({ file: s.file, slot: s.slot, nonce: BigInt(s.nonce) });

export interface Answer {
  readonly ok: boolean;
  readonly name?: string;
  readonly code?: string;
  readonly message?: string;
  readonly [key: string]: unknown;
}

/** A node process running ipcChild.js, driven one command at a time. */
export class Child {
  readonly #process: ChildProcessByStdio<Writable, Readable, null>;
  readonly #answers: AsyncIterator<string>;
  readonly exited: Promise<NodeJS.Signals | number | null>;

  constructor() {
    const script = fileURLToPath(new URL('./ipcChild.js', import.meta.url));
    this.#process = spawn(process.execPath, [script], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.#answers = createInterface({ input: this.#process.stdout })[Symbol.asyncIterator]();
    this.exited = new Promise((resolve) => this.#process.once('exit', (code, signal) => resolve(signal ?? code)));
  }

  get pid(): number {
    return this.#process.pid!;
  }

  /** Sends `command` and resolves with the child's answer; rejects when the child answers with an error. */
  async call(command: Record<string, unknown>): Promise<Answer> {
    const answer = await this.try(command);
    if (!answer.ok) throw new Error(`child failed ${command['op'] as string}: ${answer.name}: ${answer.message}`);
    return answer;
  }

  /** Sends `command` and resolves with the answer, successful or not. */
  async try(command: Record<string, unknown>): Promise<Answer> {
    this.#process.stdin.write(`${JSON.stringify(command)}\n`);
    const next = await this.#answers.next();
    if (next.done === true) throw new Error(`the child exited before answering ${command['op'] as string}`);
    return JSON.parse(next.value) as Answer;
  }

  /** SIGKILL, then waits for the exit. */
  async kill(): Promise<void> {
    this.#process.kill('SIGKILL');
    await this.exited;
  }

  async exit(): Promise<void> {
    if (this.#process.exitCode !== null || this.#process.signalCode !== null) return;
    await this.try({ op: 'exit' });
    await this.exited;
  }
}

/** A two-word barrier in shared memory (word 1: parties ready; word 0: go), for ipcChild's `barrier`. */
export class Barrier implements Disposable {
  readonly #file = SharedMemoryFile.create(8);
  readonly #words = new Int32Array(this.#file.buffer);
  readonly name = this.#file.name;

  /** Spins until `parties` children are ready, then releases them. */
  release(parties = 1, timeoutMs = 30_000): void {
    const deadline = Date.now() + timeoutMs;
    while (Atomics.load(this.#words, 1) < parties) if (Date.now() > deadline) throw new Error('barrier: the children did not arrive');
    Atomics.store(this.#words, 0, 1);
  }

  [Symbol.dispose](): void {
    this.#file.close();
    this.#file.unlink();
  }
}

/** The /dev/shm objects named by `prefix` (default: this process's default names) that exist now. */
export function shmObjects(prefix = `stowage-ipc-${process.pid}-`): string[] {
  return readdirSync('/dev/shm').filter((n) => n.startsWith(prefix));
}

export const shmExists = (name: string): boolean => readdirSync('/dev/shm').includes(name.slice(1));
