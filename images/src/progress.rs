//! Download progress: bars on a terminal (indicatif), one line per event
//! otherwise (logs, CI), nothing in tests. Three implementations, hence the trait.

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

pub trait Progress: Send + Sync {
    /// A download of `name` starts; `total` when known, `done` bytes already
    /// on disk (a resumed download).
    fn start(&self, name: &str, total: Option<u64>, done: u64) -> Box<dyn FileProgress>;
}

pub trait FileProgress: Send {
    fn inc(&mut self, n: u64);
    /// The transfer broke and will be retried (resuming).
    fn retry(&mut self, why: &str);
    fn finish(&mut self, msg: &str);
}

/// Picks bars when stderr is a terminal, lines otherwise.
pub fn auto() -> Box<dyn Progress> {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        Box::new(Bars(MultiProgress::new()))
    } else {
        Box::new(Lines)
    }
}

pub struct Quiet;
impl Progress for Quiet {
    fn start(&self, _: &str, _: Option<u64>, _: u64) -> Box<dyn FileProgress> {
        Box::new(Quiet)
    }
}
impl FileProgress for Quiet {
    fn inc(&mut self, _: u64) {}
    fn retry(&mut self, _: &str) {}
    fn finish(&mut self, _: &str) {}
}

pub struct Lines;
struct Line {
    name: String,
    total: Option<u64>,
    done: u64,
}
impl Progress for Lines {
    fn start(&self, name: &str, total: Option<u64>, done: u64) -> Box<dyn FileProgress> {
        let size = total
            .map(|t| format!(" ({})", indicatif::HumanBytes(t)))
            .unwrap_or_default();
        let from = if done > 0 {
            format!(", resuming at {}", indicatif::HumanBytes(done))
        } else {
            String::new()
        };
        eprintln!("download {name}{size}{from}");
        Box::new(Line {
            name: name.to_string(),
            total,
            done,
        })
    }
}
impl FileProgress for Line {
    fn inc(&mut self, n: u64) {
        self.done += n;
    }
    fn retry(&mut self, why: &str) {
        eprintln!(
            "download {}: {why}; will resume from {}",
            self.name,
            indicatif::HumanBytes(self.done)
        );
    }
    fn finish(&mut self, msg: &str) {
        let of = self
            .total
            .map(|t| format!(" of {}", indicatif::HumanBytes(t)))
            .unwrap_or_default();
        eprintln!(
            "download {}: {msg} ({}{of})",
            self.name,
            indicatif::HumanBytes(self.done)
        );
    }
}

pub struct Bars(pub MultiProgress);
struct Bar(ProgressBar);
impl Progress for Bars {
    fn start(&self, name: &str, total: Option<u64>, done: u64) -> Box<dyn FileProgress> {
        let pb = match total {
            Some(t) => ProgressBar::new(t),
            None => ProgressBar::no_length(),
        };
        let style = ProgressStyle::with_template(
            "{msg:40!} {bar:30} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12} {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        pb.set_style(style);
        pb.set_message(name.to_string());
        pb.set_position(done);
        Box::new(Bar(self.0.add(pb)))
    }
}
impl FileProgress for Bar {
    fn inc(&mut self, n: u64) {
        self.0.inc(n);
    }
    fn retry(&mut self, why: &str) {
        self.0
            .println(format!("{}: {why}; will resume", self.0.message()));
    }
    fn finish(&mut self, msg: &str) {
        let name = self.0.message();
        self.0.finish_with_message(format!("{name} {msg}"));
    }
}
