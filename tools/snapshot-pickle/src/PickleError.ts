import { StowageError } from '@stowage/core';

/**
 * The bytes are not a pickle Stowage can read: truncated, an opcode outside the subset it reads (see
 * `readPickle`), a length beyond the end of the data, a stack or memo misuse, or no STOP. Nothing was executed.
 */
export class MalformedPickleError extends StowageError {
  /**
   * @param offset the byte offset in the pickle where reading failed
   * @param problem what is wrong there, a sentence fragment ("BINUNICODE says 4294967295 bytes but 3 remain")
   */
  constructor(
    readonly offset: number,
    readonly problem: string,
    options?: ErrorOptions,
  ) {
    super('MALFORMED_PICKLE', `Cannot read the pickle at byte ${offset}: ${problem}. Stowage reads only pickles of plain data (protocols 2-5: dicts, lists, tuples, str, bytes, int, float, bool, None), such as torch.cuda.memory._dump_snapshot writes.`, options);
  }
}

/**
 * The pickle asks to import or call a Python object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
 * extension codes, persistent ids). Stowage executes nothing: reading stops at that opcode.
 */
export class UnsafePickleError extends StowageError {
  /**
   * @param offset the byte offset of the opcode
   * @param opcode its name (`'GLOBAL'`)
   * @param global the `module.name` it imports, when the pickle names one (`'os.system'`)
   */
  constructor(
    readonly offset: number,
    readonly opcode: string,
    readonly global?: string,
  ) {
    super(
      'UNSAFE_PICKLE',
      `Refused the pickle at byte ${offset}: ${opcode}${global === undefined ? '' : ` of ${global}`} would import or call Python code, and Stowage reads only plain data. ` +
        'Load a snapshot that torch.cuda.memory._dump_snapshot wrote, or re-save it with only dicts, lists and numbers.',
    );
  }
}
