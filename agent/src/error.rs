//! The agent's one error type, sized to what main branches on (usage
//! and URL errors exit 2, the rest 1) and to what the operator at the console
//! needs to read. Hand-written rather than thiserror to keep the
//! dependency list to serde, serde_json, libc and socket2.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum Error {
    /// Bad command line; the message says what and shows the usage.
    Usage(String),
    /// The `--post` URL is not one the agent can use.
    Url(String),
    /// Reading or writing a file of the machine.
    Io { path: PathBuf, source: io::Error },
    /// A `--disk` that is not among the disks the inspection lists.
    NoSuchDisk { name: String, known: Vec<String> },
    /// Wiping failed on these disks (each with its reason); nothing was
    /// reported, so bootd does not take the machine for clean.
    Wipe(Vec<String>),
    /// bootd answered 4xx (or 3xx, which the agent does not follow).
    Refused {
        url: String,
        status_line: String,
        body: String,
    },
    /// Connection errors or 5xx on every attempt; `last` is the last one.
    GaveUp {
        url: String,
        attempts: u32,
        last: String,
    },
    /// Rebooting or powering off did not happen.
    Power(io::Error),
}

impl Error {
    pub fn io(path: &Path, source: io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The process exit status main uses: 2 for a bad command line.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Url(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => write!(f, "{m}\n\n{}", crate::cli::USAGE),
            Error::Url(m) => write!(f, "--post: {m}"),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::NoSuchDisk { name, known } => write!(
                f,
                "--disk {name}: not a disk the inspection lists (it lists: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
            Error::Wipe(why) => write!(f, "wiping failed, nothing reported: {}", why.join("; ")),
            Error::Refused {
                url,
                status_line,
                body,
            } => {
                write!(f, "POST {url} refused: {status_line}")?;
                if !body.is_empty() {
                    write!(f, "\n{body}")?;
                }
                Ok(())
            }
            Error::GaveUp {
                url,
                attempts,
                last,
            } => write!(f, "POST {url}: gave up after {attempts} attempts: {last}"),
            Error::Power(e) => write!(f, "/proc/sysrq-trigger: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Power(source) => Some(source),
            _ => None,
        }
    }
}
