//! Pi's names for a session's folder and file (Pi 1.x's layout, used by [`PiJsonlStore`]
//! and by the check of a new header, which must have a file name).
//!
//! [`PiJsonlStore`]: super::PiJsonlStore

use crate::log::entry::Header;

/// The longest file name a session gets: 255 bytes, less the 43 the durable create's
/// temporary name adds to it.
const MAX_FILE_NAME: usize = 212;

/// Pi's session directory name for `cwd`, exactly as Pi 1.x's
/// `getDefaultSessionDirPath` builds it: strip one leading `/` or `\`, replace every
/// `/`, `\` and `:` with `-`, and wrap the result in `--…--`.
pub fn pi_session_dir_name(cwd: &str) -> String {
    let rest = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    format!("--{}--", rest.replace(['/', '\\', ':'], "-"))
}

/// Pi's file name for a session: `<timestamp>_<id>.jsonl`, where the timestamp is the
/// header's with `:` and `.` replaced by `-`. `None` when the header has no timestamp,
/// the name would contain a path separator or a NUL, or it is longer than a file system
/// can create it under (212 bytes: with the temporary name it is created under, 255).
pub fn pi_session_file_name(header: &Header) -> Option<String> {
    let stamp = header.timestamp()?.replace([':', '.'], "-");
    let name = format!("{stamp}_{}.jsonl", header.id());
    if name.contains(['/', '\\', '\0']) || name.len() > MAX_FILE_NAME {
        return None;
    }
    Some(name)
}

#[cfg(test)]
mod dir_name_tests {
    use super::pi_session_dir_name;

    #[test]
    fn a_cwd_becomes_pis_folder_name() {
        assert_eq!(
            pi_session_dir_name("/home/me/project"),
            "--home-me-project--"
        );
        assert_eq!(pi_session_dir_name(r"C:\Users\me"), "--C--Users-me--");
    }
}
