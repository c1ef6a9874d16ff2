//! Whether a program can be started, found the way starting it would find it, without
//! starting it: for the health checks of adapters and tool providers that spawn a process
//! (an ACP agent, an MCP server over stdio).
//!
//! What happens when...
//!
//! - **the program is a bare name** (`node`): each directory of the search path is tried in
//!   order, as `execvp` does; the first executable file wins.
//! - **it is a path** (`./server`, `/usr/bin/server`): it is not searched; a relative one is
//!   taken from the working directory the process would start in.
//! - **a file of that name exists but cannot be run** (no execute bit, a directory):
//!   [`NotRunnable::NotExecutable`], so the operator is not told it is missing.
//!
//! Only the file system is read: nothing is started, created or changed.
//!
//! ```
//! use std::ffi::OsStr;
//! use std::path::Path;
//! use harness_core::program::{resolve, NotRunnable};
//!
//! let here = std::env::temp_dir();
//! assert!(resolve("sh", &here, OsStr::new("/bin:/usr/bin")).is_ok());
//! assert_eq!(
//!     resolve("no-such-program-3f9c1d", &here, OsStr::new("/bin:/usr/bin")),
//!     Err(NotRunnable::CommandNotFound)
//! );
//! assert_eq!(
//!     resolve("sh", Path::new("/no/such/dir"), OsStr::new("/bin")),
//!     Err(NotRunnable::NoWorkingDirectory)
//! );
//! ```

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a program cannot be started, as a caller may read it (no path, no name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotRunnable {
    /// No file of that name on the search path, or at that path (or no program at all).
    CommandNotFound,
    /// A file of that name is there, but it is not an executable file.
    NotExecutable,
    /// The working directory it would start in is not a directory.
    NoWorkingDirectory,
}

impl NotRunnable {
    /// A short category, safe to show a caller: `its command is not found`, ...
    #[must_use]
    pub const fn category(self) -> &'static str {
        match self {
            Self::CommandNotFound => "its command is not found",
            Self::NotExecutable => "its command is not an executable file",
            Self::NoWorkingDirectory => "its working directory is not a directory",
        }
    }
}

impl fmt::Display for NotRunnable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.category())
    }
}

impl std::error::Error for NotRunnable {}

/// Whether `path` is a file the process may execute.
fn executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).is_ok_and(|m| m.is_file())
    }
}

/// Where `program` is, started in `cwd` with `search_path` as its `PATH` (the one the
/// process would be started with: the caller decides which), or why it cannot be started.
/// An empty `program` is not found. Reads the file system only.
///
/// # Errors
/// [`NotRunnable`]: the working directory is not a directory, the program is not found, or
/// what is found is not an executable file.
pub fn resolve(
    program: impl AsRef<OsStr>,
    cwd: &Path,
    search_path: &OsStr,
) -> Result<PathBuf, NotRunnable> {
    if !cwd.is_dir() {
        return Err(NotRunnable::NoWorkingDirectory);
    }
    let program = Path::new(program.as_ref());
    if program.as_os_str().is_empty() {
        return Err(NotRunnable::CommandNotFound);
    }
    if program.components().count() > 1 {
        // A path (`./agent`, `/usr/bin/agent`): not searched, relative to the cwd.
        let path = cwd.join(program);
        return match std::fs::metadata(&path) {
            Err(_) => Err(NotRunnable::CommandNotFound),
            Ok(_) if executable(&path) => Ok(path),
            Ok(_) => Err(NotRunnable::NotExecutable),
        };
    }
    let mut found_unusable = false;
    for dir in std::env::split_paths(search_path) {
        let path = dir.join(program);
        if executable(&path) {
            return Ok(path);
        }
        found_unusable |= path.exists();
    }
    Err(if found_unusable {
        NotRunnable::NotExecutable
    } else {
        NotRunnable::CommandNotFound
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> std::ffi::OsString {
        std::env::var_os("PATH").unwrap_or_default()
    }

    fn here(program: &str) -> Result<PathBuf, NotRunnable> {
        resolve(program, &std::env::temp_dir(), &path())
    }

    #[test]
    fn a_program_on_the_path_resolves_and_a_missing_one_does_not() {
        assert!(here("sh").is_ok());
        assert!(here("/bin/sh").is_ok());
        assert_eq!(
            here("no-such-agent-3f9c1d"),
            Err(NotRunnable::CommandNotFound)
        );
        assert_eq!(here("/no/such/agent"), Err(NotRunnable::CommandNotFound));
        assert_eq!(here(""), Err(NotRunnable::CommandNotFound));
        // A directory is there, but cannot be run.
        assert_eq!(here("/tmp"), Err(NotRunnable::NotExecutable));
    }

    #[test]
    fn only_the_given_search_path_is_searched() {
        let cwd = std::env::temp_dir();
        assert_eq!(
            resolve("sh", &cwd, OsStr::new("/no/such/dir")),
            Err(NotRunnable::CommandNotFound)
        );
        assert_eq!(
            resolve("sh", &cwd, OsStr::new("")),
            Err(NotRunnable::CommandNotFound)
        );
        assert!(resolve("sh", &cwd, OsStr::new("/no/such/dir:/bin")).is_ok());
    }

    #[test]
    fn a_relative_path_is_taken_from_the_working_directory() {
        let dir = std::env::temp_dir().join(format!("harness-program-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("tool.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(
            resolve("./tool.sh", &dir, OsStr::new("")),
            Err(NotRunnable::NotExecutable)
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert_eq!(
                resolve("./tool.sh", &dir, OsStr::new("")),
                Ok(dir.join("./tool.sh"))
            );
        }
        assert_eq!(
            resolve("./tool.sh", &std::env::temp_dir(), OsStr::new("")),
            Err(NotRunnable::CommandNotFound)
        );
        assert_eq!(
            resolve("sh", &script, OsStr::new("/bin")),
            Err(NotRunnable::NoWorkingDirectory)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
