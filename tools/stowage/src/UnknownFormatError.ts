import { StowageError } from '@stowage/core';

/** An input file is not in any format the command reads, or is a damaged file of one. Nothing was written. */
export class UnknownFormatError extends StowageError {
  /**
   * @param path the path as the user gave it
   * @param problem what was found, one clause ("it begins with 'PK'", "line 3 is not JSON")
   * @param expected the formats the command takes
   */
  constructor(
    readonly path: string,
    readonly problem: string,
    readonly expected: string,
    options?: ErrorOptions,
  ) {
    super('UNKNOWN_FORMAT', `${path} is not ${expected}: ${problem}.`, options);
  }
}
