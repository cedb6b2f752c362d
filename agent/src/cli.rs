//! The command line, parsed by hand (a dozen lines do not justify clap in
//! a binary every machine downloads). Pure: [`parse`] takes the arguments
//! after the program name.

use std::path::PathBuf;

use crate::http::Url;
use crate::Error;

pub const USAGE: &str = "\
usage: bootd-agent inspect --post URL [--reboot | --poweroff] [--lldp-seconds N] [--root DIR]
       bootd-agent wipe --post URL [--poweroff | --reboot] [--disk NAME]... [--root DIR]

inspect  report the machine's CPU, memory, disks, NICs (with the switch
         port from LLDP), firmware and SMBIOS strings to URL as JSON
wipe     zero the first and last MiB of every partition and disk the
         inspection lists (or only each --disk, sda or /dev/sda), then
         report the disks wiped to URL

  --post URL          http://host[:port]/path?query (bootd's, with its token)
  --reboot            after reporting, sync and reboot
  --poweroff          after reporting, sync and power off
  --lldp-seconds N    listen for LLDP up to N seconds (default 35, 0: not)
  --root DIR          read /proc, /sys and /dev under DIR (default /)";

pub const DEFAULT_LLDP_SECONDS: u64 = 35;
const MAX_LLDP_SECONDS: u64 = 600;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Inspect(Inspect),
    Wipe(Wipe),
    Help,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspect {
    pub post: Url,
    pub reboot: bool,
    /// After the report, power off (a machine booted from virtual media:
    /// its BMC is given the next ISO while it is off).
    pub poweroff: bool,
    pub lldp_seconds: u64,
    pub root: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wipe {
    pub post: Url,
    pub poweroff: bool,
    /// After the report, reboot (an adopted machine: it installs next).
    pub reboot: bool,
    /// Kernel names (`sda`); empty: every disk.
    pub disks: Vec<String>,
    pub root: PathBuf,
}

pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, Error> {
    let usage = |m: String| Error::Usage(m);
    let mut args = args.into_iter();
    let sub = match args.next().as_deref() {
        None => return Err(usage("no command".into())),
        Some("-h" | "--help" | "help") => return Ok(Command::Help),
        Some(s @ ("inspect" | "wipe")) => s.to_string(),
        Some(other) => return Err(usage(format!("unknown command {other:?}"))),
    };
    let (mut post, mut root, mut lldp, mut disks) = (None, None, None, Vec::new());
    let (mut reboot, mut poweroff) = (false, false);
    // Bounded by the number of arguments: each turn takes one or two.
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| usage(format!("{flag} needs {what}")))
        };
        match (sub.as_str(), flag.as_str()) {
            (_, "-h" | "--help") => return Ok(Command::Help),
            (_, "--post") => post = Some(Url::parse(&value("a URL")?)?),
            (_, "--root") => root = Some(PathBuf::from(value("a directory")?)),
            ("inspect" | "wipe", "--reboot") if inline.is_none() && !poweroff => reboot = true,
            ("inspect" | "wipe", "--poweroff") if inline.is_none() && !reboot => poweroff = true,
            ("inspect", "--lldp-seconds") => {
                let v = value("a number of seconds")?;
                lldp = Some(
                    v.parse::<u64>()
                        .ok()
                        .filter(|&n| n <= MAX_LLDP_SECONDS)
                        .ok_or_else(|| {
                            usage(format!("--lldp-seconds {v:?}: 0 to {MAX_LLDP_SECONDS}"))
                        })?,
                );
            }
            ("wipe", "--disk") => {
                let v = value("a disk name")?;
                let name = v.strip_prefix("/dev/").unwrap_or(&v);
                if name.is_empty() || name.contains('/') {
                    return Err(usage(format!(
                        "--disk {v:?}: a kernel name, sda or /dev/sda"
                    )));
                }
                if !disks.iter().any(|d| d == name) {
                    disks.push(name.to_string());
                }
            }
            _ => return Err(usage(format!("{sub}: unknown argument {arg:?}"))),
        }
    }
    let post = post.ok_or_else(|| usage(format!("{sub} needs --post URL")))?;
    let root = root.unwrap_or_else(|| PathBuf::from("/"));
    Ok(if sub == "inspect" {
        Command::Inspect(Inspect {
            post,
            reboot,
            poweroff,
            lldp_seconds: lldp.unwrap_or(DEFAULT_LLDP_SECONDS),
            root,
        })
    } else {
        Command::Wipe(Wipe {
            post,
            poweroff,
            reboot,
            disks,
            root,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, Error> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn inspect() {
        let Command::Inspect(i) = p(&["inspect", "--post", "http://b:8080/i?t=1"]).unwrap() else {
            panic!()
        };
        assert_eq!(i.post.target, "/i?t=1");
        assert_eq!(
            (i.reboot, i.lldp_seconds, i.root),
            (false, 35, PathBuf::from("/"))
        );
        let Command::Inspect(i) = p(&[
            "inspect",
            "--reboot",
            "--lldp-seconds=0",
            "--root",
            "/tmp/x",
            "--post=http://b/",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (i.reboot, i.poweroff, i.lldp_seconds, i.root),
            (true, false, 0, PathBuf::from("/tmp/x"))
        );
        let Command::Inspect(i) = p(&["inspect", "--post", "http://b/", "--poweroff"]).unwrap()
        else {
            panic!()
        };
        assert!(i.poweroff && !i.reboot);
    }

    #[test]
    fn wipe() {
        let Command::Wipe(w) = p(&[
            "wipe",
            "--post",
            "http://b/",
            "--disk",
            "/dev/sda",
            "--disk",
            "nvme0n1",
            "--disk",
            "sda",
            "--poweroff",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(w.disks, ["sda", "nvme0n1"]);
        assert!(w.poweroff && !w.reboot);
        let Command::Wipe(w) = p(&["wipe", "--post", "http://b/", "--reboot"]).unwrap() else {
            panic!()
        };
        assert!(w.reboot && !w.poweroff && w.disks.is_empty());
    }

    #[test]
    fn refused() {
        for bad in [
            &[][..],
            &["format"],
            &["inspect"],
            &["inspect", "--post"],
            &["inspect", "--post", "https://b/"],
            &["inspect", "--post", "http://b/", "--poweroff", "--reboot"],
            &["inspect", "--post", "http://b/", "--lldp-seconds", "-1"],
            &["inspect", "--post", "http://b/", "--lldp-seconds", "601"],
            &["inspect", "--post", "http://b/", "--reboot=yes"],
            &["wipe", "--post", "http://b/", "--reboot", "--poweroff"],
            &["wipe", "--post", "http://b/", "--poweroff", "--reboot"],
            &["wipe", "--post", "http://b/", "--disk", "../sda"],
            &["wipe", "--post", "http://b/", "extra"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
        assert_eq!(p(&["inspect", "--help"]).unwrap(), Command::Help);
        assert_eq!(
            p(&["inspect", "--post", "http://b/", "--lldp-seconds", "x"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }
}
