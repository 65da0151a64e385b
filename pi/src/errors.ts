/**
 * The errors a state's calls throw besides the core's own (plain `Error`s with the core's
 * message): a value stored under a newer version, a value `validate` refuses, a failed
 * `migrate`.
 */

/**
 * A state written under a newer version of its shape than the state's `version`: every
 * read, write, patch and drop of it is refused, and nothing is appended. The message is the
 * Rust core's (`StateError::NewerStateVersion`).
 */
export class StateVersionError extends Error {
  override readonly name = "StateVersionError";
  /** The plugin id. */
  readonly pluginId: string;
  /** The version the value was written under. */
  readonly storedVersion: number;
  /** The state's `version`: the newest this code knows. */
  readonly knownVersion: number;
  /** The entry of the event that wrote it. */
  readonly entryId: string | undefined;
  constructor(pluginId: string, storedVersion: number, knownVersion: number, entryId: string | undefined, message?: string) {
    super(
      message ??
        `plugin '${pluginId}': the state${entryId === undefined ? "" : ` (entry '${entryId}')`} was written under stateVersion ${storedVersion}, newer than version ${knownVersion} that this code knows; it is neither read nor written over (upgrade the extension that reads it)`,
    );
    this.pluginId = pluginId;
    this.storedVersion = storedVersion;
    this.knownVersion = knownVersion;
    this.entryId = entryId;
  }
}

/**
 * A value that does not pass the state's `validate`: a stored one on a read (`entryId`: the
 * event that set it), or the value a write would leave (`entryId` `undefined`; nothing is
 * appended). `path` is the first failing place as a JSON Pointer (`"/items/0/done"`; `""`:
 * the value itself, always so for a type-guard function), `detail` what is wrong there.
 */
export class StateValidationError extends Error {
  override readonly name = "StateValidationError";
  readonly pluginId: string;
  readonly entryId: string | undefined;
  readonly path: string;
  readonly detail: string;
  constructor(pluginId: string, entryId: string | undefined, path: string, detail: string, message: string) {
    super(message);
    this.pluginId = pluginId;
    this.entryId = entryId;
    this.path = path;
    this.detail = detail;
  }
}

/**
 * The state's `migrate` failed on a value written under an older version (it threw, or
 * returned what JSON cannot carry). The message names the plugin, the entry and the versions
 * as the Rust core's `StateError::Migrate` does.
 */
export class StateMigrationError extends Error {
  override readonly name = "StateMigrationError";
  readonly pluginId: string;
  readonly fromVersion: number;
  readonly toVersion: number;
  readonly entryId: string | undefined;
  readonly detail: string;
  constructor(
    pluginId: string,
    fromVersion: number,
    toVersion: number,
    entryId: string | undefined,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(
      `plugin '${pluginId}': migrating the state${entryId === undefined ? "" : ` (entry '${entryId}')`} from version ${fromVersion} to ${toVersion} failed: ${detail}`,
      options,
    );
    this.pluginId = pluginId;
    this.fromVersion = fromVersion;
    this.toVersion = toVersion;
    this.entryId = entryId;
    this.detail = detail;
  }
}
