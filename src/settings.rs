//! Where the SQLite projection lives (docs/spec.md §4, "Location, first hit wins").
//!
//! Resolution is a pure function of [`LocationInputs`]: it reads the settings files it
//! names (and Pi's `trust.json`) but never the process environment or the real home
//! directory. [`LocationInputs::from_env`] is the one place that reads those.
//!
//! Order, first hit wins:
//!
//! 1. the explicit `database_path` option (a non-empty absolute path, else
//!    [`SettingsError`]);
//! 2. `sessionState.databasePath` in `{cwd}/.pi/settings.json`, only when the project is
//!    trusted ([`ProjectTrust`]); an untrusted project counts as absent;
//! 3. the same key in `{agent_dir}/settings.json`;
//! 4. the default, `{agent_dir}/sessions/states.sqlite`.
//!
//! A missing file or key is silent and passes to the next source. A settings file that is
//! present but broken (unreadable, bad JSON, wrong types, an empty or unsupported value)
//! does **not** pass to the next source: the location falls back to the default and a
//! [`SettingsDiagnostic`] says which file and what is wrong. The caller reports it once.
//!
//! ```
//! use session_state::settings::{LocationInputs, LocationSource, ProjectTrust};
//!
//! let dir = tempfile::tempdir()?;
//! let agent_dir = dir.path().join("agent");
//! let inputs = LocationInputs::new(dir.path().join("project"), &agent_dir);
//! let resolved = inputs.resolve()?;
//! assert_eq!(resolved.path, agent_dir.join("sessions").join("states.sqlite"));
//! assert_eq!(resolved.source, LocationSource::Default);
//! assert!(resolved.diagnostics.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

/// The environment variable that relocates Pi's agent directory (Pi 1.x `ENV_AGENT_DIR`).
pub(crate) const AGENT_DIR_ENV: &str = "PI_CODING_AGENT_DIR";

/// Name of the project configuration directory under `cwd` (Pi's `CONFIG_DIR_NAME`).
const PROJECT_CONFIG_DIR: &str = ".pi";
const SETTINGS_FILE: &str = "settings.json";
const TRUST_FILE: &str = "trust.json";
const SECTION_KEY: &str = "sessionState";
const PATH_KEY: &str = "databasePath";

/// The default projection database for an agent directory:
/// `{agent_dir}/sessions/states.sqlite`.
fn default_database_path(agent_dir: &Path) -> PathBuf {
    agent_dir.join("sessions").join("states.sqlite")
}

/// Pi's agent directory from the value of `$PI_CODING_AGENT_DIR` and the home directory,
/// the way Pi 1.x's `getAgentDir()` computes it.
///
/// - unset or empty: `{home}/.pi/agent`;
/// - `~` or `~/x`: the home directory, or `x` under it;
/// - `file:///x`: the path `/x` (percent-decoded);
/// - anything else is taken as it is. Like Pi, a relative value stays relative (it is
///   relative to the process's working directory; [`LocationInputs::from_env`] makes it
///   absolute) and `~user` is not expanded.
///
/// Returns `None` when the result needs the home directory and `home` is `None`.
///
/// ```
/// use std::path::Path;
/// use session_state::settings::agent_dir;
///
/// let home = Path::new("/home/ada");
/// assert_eq!(agent_dir(None, Some(home)), Some(home.join(".pi/agent")));
/// assert_eq!(agent_dir(Some("~/pi".into()), Some(home)), Some(home.join("pi")));
/// assert_eq!(agent_dir(Some("/srv/pi".into()), None), Some("/srv/pi".into()));
/// assert_eq!(agent_dir(None, None), None);
/// ```
pub fn agent_dir(env_value: Option<OsString>, home: Option<&Path>) -> Option<PathBuf> {
    // Pi tests `if (envDir)`, so an empty value means "unset".
    let Some(value) = env_value.filter(|v| !v.is_empty()) else {
        return home.map(|h| h.join(PROJECT_CONFIG_DIR).join("agent"));
    };
    let value = PathBuf::from(value);
    if let Some(rest) = home_relative(&value) {
        return home.map(|h| join_non_empty(h, rest));
    }
    if let Some(path) = value.to_str().and_then(file_url_to_path) {
        return Some(path);
    }
    Some(value)
}

/// `Some(rest)` when `path` is `~` or `~/rest` (also `~\rest` on Windows); `~user` is not.
fn home_relative(path: &Path) -> Option<&Path> {
    // Component-wise, so `~user` (one component) never matches `~`.
    path.strip_prefix("~").ok()
}

fn join_non_empty(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    }
}

/// Node's `fileURLToPath` for local `file:` URLs; `None` when `s` is not one we can decode.
fn file_url_to_path(s: &str) -> Option<PathBuf> {
    let rest = s.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let decoded = percent_decode(rest)?;
    // `file:///C:/x` names `C:/x` on Windows.
    #[cfg(windows)]
    let decoded = {
        let b = decoded.as_bytes();
        if b.len() >= 3 && b[0] == b'/' && b[1].is_ascii_alphabetic() && b[2] == b':' {
            decoded[1..].to_owned()
        } else {
            decoded
        }
    };
    Some(PathBuf::from(decoded))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether `{cwd}/.pi/settings.json` may be read.
///
/// Project settings are content of the working folder; a folder must not be able to move
/// where state is cached unless the user trusts it, as in Pi 1.x.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProjectTrust {
    /// The caller vouches for the project (the CLI's `--trust-project`).
    Trusted,
    /// The project settings file is never read. The default.
    #[default]
    Untrusted,
    /// Use the decision Pi 1.x saved in `{agent_dir}/trust.json`: the nearest ancestor
    /// folder of `cwd` (`cwd` included, after resolving symlinks) with a `true` or `false`
    /// entry decides; no entry means untrusted. The file is only read when the project
    /// has a `.pi/settings.json`.
    FromPiDecisions,
}

/// Everything location resolution depends on. Build it with [`LocationInputs::new`] (pure)
/// or [`LocationInputs::from_env`] (reads the real environment), then call
/// [`LocationInputs::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationInputs {
    /// The explicit `database_path` option (the CLI's `--db`). When set it wins, and it
    /// must be a non-empty absolute path.
    pub database_path: Option<PathBuf>,
    /// The project folder whose `.pi/settings.json` is consulted. Should be absolute.
    pub cwd: PathBuf,
    /// Pi's agent directory (see [`agent_dir`]). Should be absolute.
    pub agent_dir: PathBuf,
    /// The user's home directory, for `~` in settings values; `None` when unknown.
    pub home: Option<PathBuf>,
    /// Whether the project settings may be read.
    pub trust: ProjectTrust,
}

impl LocationInputs {
    /// Inputs with no explicit path, no known home, and an untrusted project.
    pub fn new(cwd: impl Into<PathBuf>, agent_dir: impl Into<PathBuf>) -> Self {
        Self {
            database_path: None,
            cwd: cwd.into(),
            agent_dir: agent_dir.into(),
            home: None,
            trust: ProjectTrust::Untrusted,
        }
    }

    /// Inputs from the real process: the home directory (`$HOME`, else the password
    /// database; `USERPROFILE` on Windows) and `$PI_CODING_AGENT_DIR`. A relative `cwd` or
    /// agent directory is made absolute against the process's working directory, as Pi
    /// does. `database_path` is left unset.
    ///
    /// # Errors
    ///
    /// [`SettingsError::NoAgentDir`] when `$PI_CODING_AGENT_DIR` is unset (or needs `~`)
    /// and the home directory is unknown; [`SettingsError::CurrentDir`] when a relative
    /// path cannot be made absolute.
    pub fn from_env(cwd: impl Into<PathBuf>, trust: ProjectTrust) -> Result<Self, SettingsError> {
        let home = home_dir();
        let agent_dir = agent_dir(std::env::var_os(AGENT_DIR_ENV), home.as_deref())
            .ok_or(SettingsError::NoAgentDir)?;
        Ok(Self {
            database_path: None,
            cwd: make_absolute(cwd.into())?,
            agent_dir: make_absolute(agent_dir)?,
            home,
            trust,
        })
    }

    /// Sets the explicit `database_path` option.
    #[must_use]
    pub fn database_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.database_path = Some(path.into());
        self
    }

    /// Sets the home directory used for `~` in settings values.
    #[must_use]
    pub fn home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Sets the project trust.
    #[must_use]
    pub fn trust(mut self, trust: ProjectTrust) -> Self {
        self.trust = trust;
        self
    }

    /// Resolves the projection database location (docs/spec.md §4): the option, then trusted project
    /// settings, then user settings, then the default; first hit wins.
    ///
    /// Reads `{cwd}/.pi/settings.json` (only when trusted), `{agent_dir}/settings.json` and,
    /// for [`ProjectTrust::FromPiDecisions`], `{agent_dir}/trust.json`. Never writes, never
    /// creates the database or its folder, never reads the environment.
    ///
    /// A file that is missing, or lacks the key, passes to the next source silently. A file
    /// that is present but unusable makes the location the **default** (not the next source)
    /// and adds a [`SettingsDiagnostic`]; an unusable `trust.json` makes the project
    /// untrusted and adds one.
    ///
    /// # Errors
    ///
    /// Only for the explicit option: [`SettingsError::EmptyDatabasePath`],
    /// [`SettingsError::RelativeDatabasePath`]. Bad settings files are never errors.
    pub fn resolve(&self) -> Result<ResolvedLocation, SettingsError> {
        resolve_location(self)
    }
}

fn make_absolute(path: PathBuf) -> Result<PathBuf, SettingsError> {
    if path.is_absolute() {
        return Ok(path);
    }
    std::path::absolute(&path).map_err(|source| SettingsError::CurrentDir { path, source })
}

/// The user's home directory, or `None` when it is unknown or empty.
fn home_dir() -> Option<PathBuf> {
    // On Unix it reads `$HOME` then the password database, like Node's `os.homedir()`
    // (not deprecated since Rust 1.87; the crate's MSRV is 1.89).
    std::env::home_dir().filter(|h| !h.as_os_str().is_empty())
}

/// Which source decided the database location.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LocationSource {
    /// The explicit `database_path` option.
    Option,
    /// `sessionState.databasePath` in this project settings file.
    ProjectSettings(PathBuf),
    /// `sessionState.databasePath` in this user settings file.
    UserSettings(PathBuf),
    /// `{agent_dir}/sessions/states.sqlite`, because nothing else was set or a setting was
    /// unusable (then [`ResolvedLocation::diagnostics`] says why).
    Default,
}

impl fmt::Display for LocationSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Option => f.write_str("the database path option"),
            Self::ProjectSettings(p) => write!(f, "project settings {}", p.display()),
            Self::UserSettings(p) => write!(f, "user settings {}", p.display()),
            Self::Default => f.write_str("the default location"),
        }
    }
}

/// The resolved projection database location.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedLocation {
    /// The database file. Not created or checked here.
    pub path: PathBuf,
    /// Which source decided it.
    pub source: LocationSource,
    /// Problems found on the way, each to be reported once (the CLI prints them to
    /// stderr). Non-empty only when a file was present but unusable.
    pub diagnostics: Vec<SettingsDiagnostic>,
}

impl ResolvedLocation {
    /// The location an explicit `database_path` option names (the CLI's `--db`,
    /// [`LocationInputs::database_path`], [`crate::StoreOptions::database_path`]): the path itself,
    /// which must be non-empty and absolute. This is the one check of an explicit path;
    /// nothing is read, created or checked on disk.
    ///
    /// ```
    /// use session_state::settings::{LocationSource, ResolvedLocation, SettingsError};
    ///
    /// let at = ResolvedLocation::explicit("/tmp/states.sqlite")?;
    /// assert_eq!(at.source, LocationSource::Option);
    /// assert!(matches!(
    ///     ResolvedLocation::explicit("states.sqlite"),
    ///     Err(SettingsError::RelativeDatabasePath { .. })
    /// ));
    /// # Ok::<(), SettingsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`SettingsError::EmptyDatabasePath`], [`SettingsError::RelativeDatabasePath`].
    pub fn explicit(path: impl Into<PathBuf>) -> Result<ResolvedLocation, SettingsError> {
        let path = path.into();
        if path.as_os_str().is_empty() {
            return Err(SettingsError::EmptyDatabasePath);
        }
        if !path.is_absolute() {
            return Err(SettingsError::RelativeDatabasePath { path });
        }
        Ok(ResolvedLocation {
            path,
            source: LocationSource::Option,
            diagnostics: Vec::new(),
        })
    }
}

/// A settings or trust file that is present but unusable, and what was done instead.
///
/// `Display` gives one line naming the file, the problem and the fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettingsDiagnostic {
    /// The file with the problem.
    pub file: PathBuf,
    /// What is wrong with it.
    pub problem: SettingsProblem,
    /// What resolution did instead.
    pub fallback: Fallback,
}

impl fmt::Display for SettingsDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}; {}",
            self.file.display(),
            self.problem,
            self.fallback
        )
    }
}

/// What is wrong with a settings or trust file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettingsProblem {
    /// The file exists but could not be read (permissions, a directory, …).
    Unreadable {
        /// The kind of I/O error.
        kind: io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// The file is not valid JSON (or not UTF-8).
    InvalidJson {
        /// The parser's message, with line and column.
        message: String,
    },
    /// The top level is not a JSON object.
    NotAnObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// `sessionState` is not a JSON object.
    SectionNotAnObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// `sessionState.databasePath` is not a string.
    NotAString {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// `sessionState.databasePath` is empty or only whitespace.
    EmptyValue,
    /// `sessionState.databasePath` starts with `~` but the home directory is unknown.
    HomeUnknown {
        /// The setting's value.
        value: String,
    },
    /// `sessionState.databasePath` has a form that is not supported (`~user`, a URL, a NUL
    /// byte).
    UnsupportedForm {
        /// The setting's value.
        value: String,
        /// Why it is not supported and what to write instead.
        reason: &'static str,
    },
    /// A `trust.json` value is not `true`, `false` or `null` (Pi rejects the whole file).
    InvalidTrustValue {
        /// The folder the entry is for.
        key: String,
        /// The JSON type found instead.
        found: &'static str,
    },
}

impl fmt::Display for SettingsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KEY: &str = "`sessionState.databasePath`";
        match self {
            Self::Unreadable { message, .. } => write!(f, "cannot be read: {message}"),
            Self::InvalidJson { message } => write!(f, "is not valid JSON: {message}"),
            Self::NotAnObject { found } => {
                write!(f, "must contain a JSON object, found {found}")
            }
            Self::SectionNotAnObject { found } => {
                write!(f, "`sessionState` must be an object, found {found}")
            }
            Self::NotAString { found } => write!(f, "{KEY} must be a string, found {found}"),
            Self::EmptyValue => write!(f, "{KEY} is empty"),
            Self::HomeUnknown { value } => write!(
                f,
                "{KEY} is {value:?}, which needs the home directory, but it is unknown \
                 (set HOME, or write an absolute path)"
            ),
            Self::UnsupportedForm { value, reason } => {
                write!(f, "{KEY} is {value:?}: {reason}")
            }
            Self::InvalidTrustValue { key, found } => write!(
                f,
                "the entry for {key:?} must be true, false or null, found {found}"
            ),
        }
    }
}

/// What resolution did because of a [`SettingsDiagnostic`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback {
    /// The default location was used; later sources were not consulted.
    Default(PathBuf),
    /// The project was treated as untrusted (its settings counted as absent).
    Untrusted,
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default(p) => write!(f, "using the default database {}", p.display()),
            Self::Untrusted => f.write_str("treating the project as untrusted"),
        }
    }
}

/// An explicit option that cannot be used, or a location that cannot be computed at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The explicit `database_path` option is empty.
    #[error(
        "the database path option is empty; pass an absolute path to a database file, \
         or leave the option out to use the settings or the default location"
    )]
    EmptyDatabasePath,
    /// The explicit `database_path` option is not absolute.
    #[error(
        "the database path option {:?} is relative; pass an absolute path{} (for example \
         /tmp/states.sqlite), or leave the option out to use the settings or the default \
         location",
        path.display().to_string(),
        tilde_hint(path)
    )]
    RelativeDatabasePath {
        /// The option's value.
        path: PathBuf,
    },
    /// Neither `$PI_CODING_AGENT_DIR` nor the home directory is available.
    #[error(
        "cannot locate Pi's agent directory: {AGENT_DIR_ENV} is not set (or starts with `~`) \
         and the home directory is unknown; set {AGENT_DIR_ENV} or HOME"
    )]
    NoAgentDir,
    /// A relative path could not be made absolute.
    #[error("cannot resolve the relative path {} against the current directory: {source}", path.display())]
    CurrentDir {
        /// The relative path.
        path: PathBuf,
        /// Why the current directory is not available.
        source: io::Error,
    },
}

fn tilde_hint(path: &Path) -> &'static str {
    if path.as_os_str().to_string_lossy().starts_with('~') {
        " (`~` is not expanded here; write the home directory out)"
    } else {
        ""
    }
}

/// [`LocationInputs::resolve`].
fn resolve_location(inputs: &LocationInputs) -> Result<ResolvedLocation, SettingsError> {
    if let Some(path) = &inputs.database_path {
        return ResolvedLocation::explicit(path.clone());
    }

    let default = default_database_path(&inputs.agent_dir);
    let mut diagnostics = Vec::new();

    let project_dir = inputs.cwd.join(PROJECT_CONFIG_DIR);
    let project_file = project_dir.join(SETTINGS_FILE);
    let trusted = match inputs.trust {
        ProjectTrust::Trusted => true,
        ProjectTrust::Untrusted => false,
        // Pi only asks for a decision when the project has something to protect.
        ProjectTrust::FromPiDecisions => {
            !matches!(project_file.try_exists(), Ok(false))
                && pi_trust_decision(&inputs.agent_dir, &inputs.cwd, &mut diagnostics) == Some(true)
        }
    };

    let user_file = inputs.agent_dir.join(SETTINGS_FILE);
    let mut sources = Vec::with_capacity(2);
    if trusted {
        sources.push((project_file.clone(), project_dir, true));
    }
    sources.push((user_file, inputs.agent_dir.clone(), false));

    for (file, base, is_project) in sources {
        let outcome = match read_setting(&file) {
            Lookup::Absent => continue,
            Lookup::Problem(problem) => Err(problem),
            Lookup::Found(value) => interpret_value(&value, &base, inputs.home.as_deref()),
        };
        return Ok(match outcome {
            Ok(path) => ResolvedLocation {
                path,
                source: if is_project {
                    LocationSource::ProjectSettings(file)
                } else {
                    LocationSource::UserSettings(file)
                },
                diagnostics,
            },
            Err(problem) => {
                diagnostics.push(SettingsDiagnostic {
                    file,
                    problem,
                    fallback: Fallback::Default(default.clone()),
                });
                ResolvedLocation {
                    path: default,
                    source: LocationSource::Default,
                    diagnostics,
                }
            }
        });
    }

    Ok(ResolvedLocation {
        path: default,
        source: LocationSource::Default,
        diagnostics,
    })
}

enum Lookup {
    Absent,
    Found(String),
    Problem(SettingsProblem),
}

fn read_setting(file: &Path) -> Lookup {
    let root = match read_json(file) {
        Ok(None) => return Lookup::Absent,
        Ok(Some(root)) => root,
        Err(problem) => return Lookup::Problem(problem),
    };
    let Value::Object(root) = root else {
        return Lookup::Problem(SettingsProblem::NotAnObject {
            found: json_type(&root),
        });
    };
    let section = match root.get(SECTION_KEY) {
        None => return Lookup::Absent,
        Some(Value::Object(section)) => section,
        Some(other) => {
            return Lookup::Problem(SettingsProblem::SectionNotAnObject {
                found: json_type(other),
            });
        }
    };
    match section.get(PATH_KEY) {
        None => Lookup::Absent,
        Some(Value::String(s)) => Lookup::Found(s.clone()),
        Some(other) => Lookup::Problem(SettingsProblem::NotAString {
            found: json_type(other),
        }),
    }
}

/// `Ok(None)` when the file does not exist or is empty (Pi treats an empty settings file
/// as `{}`).
fn read_json(file: &Path) -> Result<Option<Value>, SettingsProblem> {
    match read_bytes(file)? {
        Some(bytes) if !bytes.is_empty() => parse_json(&bytes).map(Some),
        _ => Ok(None),
    }
}

/// The bytes of a file Pi reads (settings, trust), `Ok(None)` when it does not exist.
fn read_bytes(file: &Path) -> Result<Option<Vec<u8>>, SettingsProblem> {
    match fs::read(file) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SettingsProblem::Unreadable {
            kind: e.kind(),
            message: e.to_string(),
        }),
    }
}

/// JSON as Pi parses its files: a UTF-8 byte order mark is stripped first.
fn parse_json(bytes: &[u8]) -> Result<Value, SettingsProblem> {
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    serde_json::from_slice(text).map_err(|e| SettingsProblem::InvalidJson {
        message: e.to_string(),
    })
}

/// Turns a setting's string into a path; `base` anchors relative values.
fn interpret_value(
    value: &str,
    base: &Path,
    home: Option<&Path>,
) -> Result<PathBuf, SettingsProblem> {
    if value.trim().is_empty() {
        return Err(SettingsProblem::EmptyValue);
    }
    let unsupported = |reason| SettingsProblem::UnsupportedForm {
        value: value.to_owned(),
        reason,
    };
    if value.contains('\0') {
        return Err(unsupported("a path cannot contain a NUL byte"));
    }
    let path = Path::new(value);
    if let Some(rest) = home_relative(path) {
        return match home {
            Some(home) => Ok(join_non_empty(home, rest)),
            None => Err(SettingsProblem::HomeUnknown {
                value: value.to_owned(),
            }),
        };
    }
    if value.starts_with('~') {
        return Err(unsupported(
            "`~user` is not supported; write the absolute path, or `~/…` for your own home",
        ));
    }
    if looks_like_url(value) {
        return Err(unsupported("URLs are not supported; write a file path"));
    }
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let relative: PathBuf = path
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect();
    Ok(join_non_empty(base, &relative))
}

/// `scheme://…` with a scheme of two or more characters (so `C://x` is not a URL).
fn looks_like_url(value: &str) -> bool {
    let Some((scheme, _)) = value.split_once("://") else {
        return false;
    };
    scheme.len() >= 2
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Pi 1.x's saved decision for `cwd` (`ProjectTrustStore.getEntry`): `None` when there is
/// none or `trust.json` is unusable (then a diagnostic is pushed).
fn pi_trust_decision(
    agent_dir: &Path,
    cwd: &Path,
    diagnostics: &mut Vec<SettingsDiagnostic>,
) -> Option<bool> {
    let file = agent_dir.join(TRUST_FILE);
    let entries = match read_trust_file(&file) {
        Ok(entries) => entries?,
        Err(problem) => {
            diagnostics.push(SettingsDiagnostic {
                file,
                problem,
                fallback: Fallback::Untrusted,
            });
            return None;
        }
    };
    // Pi keys decisions by canonical (symlink-resolved) folder; it falls back to the
    // path as given when it cannot be resolved.
    let cwd = fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let cwd = comparison_key(&cwd);
    for dir in cwd.ancestors() {
        let decision = entries.iter().find_map(|(key, value)| match value {
            Value::Bool(b) if comparison_key(Path::new(key)) == dir => Some(*b),
            _ => None,
        });
        if decision.is_some() {
            return decision;
        }
    }
    None
}

/// The entries of `trust.json`, `Ok(None)` when it does not exist. Validated as Pi does:
/// an object whose values are all `true`, `false` or `null`, else the whole file is bad.
fn read_trust_file(file: &Path) -> Result<Option<Map<String, Value>>, SettingsProblem> {
    let Some(bytes) = read_bytes(file)? else {
        return Ok(None);
    };
    // Unlike settings, Pi parses an empty trust file (and fails).
    let root = parse_json(&bytes)?;
    let Value::Object(entries) = root else {
        return Err(SettingsProblem::NotAnObject {
            found: json_type(&root),
        });
    };
    if let Some((key, value)) = entries
        .iter()
        .find(|(_, v)| !matches!(v, Value::Bool(_) | Value::Null))
    {
        return Err(SettingsProblem::InvalidTrustValue {
            key: key.clone(),
            found: json_type(value),
        });
    }
    Ok(Some(entries))
}

/// Pi's `getPathComparisonKey`, without touching the filesystem or the process's cwd:
/// `.` and `..` resolved lexically, trailing separators dropped, case folded on Windows.
fn comparison_key(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    #[cfg(windows)]
    {
        // `fs::canonicalize` returns `\\?\C:\…`; Pi's `realpath` returns `C:\…`.
        let s = out.to_string_lossy().to_lowercase();
        let verbatim = r"\\?\";
        let s = if s.starts_with(verbatim) && !s[verbatim.len()..].starts_with("unc\\") {
            s[verbatim.len()..].to_owned()
        } else {
            s
        };
        out = PathBuf::from(s);
    }
    out
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;

    /// Windows paths: `--db` with a drive letter, a `\\?\` prefix or a UNC share (a path
    /// without a drive or a root is refused as relative), Pi's agent directory with a
    /// drive letter, `~\` or a `file:///C:/` URL, a `databasePath` setting with a drive
    /// letter, and `\\?\C:\…` compared equal to `c:\…` (run under Wine by
    /// `.ci/windows-unit`).
    #[cfg(windows)]
    #[test]
    fn windows_paths_with_drive_letters_and_verbatim_prefixes_resolve() {
        for db in [
            r"C:\Users\me\states.sqlite",
            r"\\?\C:\Users\me\states.sqlite",
            r"\\server\share\states.sqlite",
        ] {
            let loc = ResolvedLocation::explicit(db).expect(db);
            assert_eq!(loc.path, Path::new(db));
            assert_eq!(loc.source, LocationSource::Option);
        }
        for relative in [r"C:states.sqlite", r"\states.sqlite", r"states.sqlite"] {
            assert!(
                matches!(
                    ResolvedLocation::explicit(relative),
                    Err(SettingsError::RelativeDatabasePath { .. })
                ),
                "{relative}"
            );
        }
        let home = Path::new(r"C:\Users\me");
        assert_eq!(
            agent_dir(Some(r"D:\pi\agent".into()), Some(home)),
            Some(PathBuf::from(r"D:\pi\agent"))
        );
        assert_eq!(
            agent_dir(Some(r"~\pi".into()), Some(home)),
            Some(PathBuf::from(r"C:\Users\me\pi"))
        );
        assert_eq!(
            agent_dir(Some("file:///C:/pi/agent".into()), None),
            Some(PathBuf::from("C:/pi/agent"))
        );
        assert_eq!(
            default_database_path(Path::new(r"C:\Users\me\.pi\agent")),
            Path::new(r"C:\Users\me\.pi\agent\sessions\states.sqlite")
        );
        assert!(!looks_like_url(r"C:\x") && !looks_like_url("C://x"));
        assert_eq!(
            comparison_key(Path::new(r"\\?\C:\Users\Me\.\x\..\project")),
            comparison_key(Path::new(r"c:\users\me\project"))
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let agent = dir.path().join("agent");
        std::fs::create_dir_all(&agent).expect("mkdir");
        std::fs::write(
            agent.join(SETTINGS_FILE),
            r#"{"sessionState": {"databasePath": "D:\\data\\states.sqlite"}}"#,
        )
        .expect("settings");
        let loc = resolve_location(&LocationInputs {
            database_path: None,
            cwd: dir.path().to_path_buf(),
            agent_dir: agent.clone(),
            home: Some(home.to_path_buf()),
            trust: ProjectTrust::Untrusted,
        })
        .expect("resolve");
        assert_eq!(loc.path, Path::new(r"D:\data\states.sqlite"), "{loc:?}");
        assert!(loc.diagnostics.is_empty(), "{loc:?}");
    }
}
