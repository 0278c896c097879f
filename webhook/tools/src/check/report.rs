//! The check's output: one line per finding, `PASS`, `FAIL`, `WARN` or
//! `INFO` first, printed as it is found, and the count of failures that
//! decides the exit status.

use std::io::Write;

/// How a finding counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Works as it should.
    Pass,
    /// Broken: the command exits 1.
    Fail,
    /// Works, but something an operator should know (not counted as failed).
    Warn,
    /// A fact (what exists, what was chosen).
    Info,
}

impl Level {
    /// The line's first word.
    pub fn label(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Warn => "WARN",
            Self::Info => "INFO",
        }
    }
}

/// Findings written to `out` as they come, counted.
pub struct Report<W: Write> {
    out: W,
    failed: usize,
    warned: usize,
    lines: Vec<(Level, String)>,
}

impl<W: Write> Report<W> {
    /// A report printing to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            failed: 0,
            warned: 0,
            lines: Vec::new(),
        }
    }

    /// Record and print one finding (a failed write to `out` is ignored:
    /// the exit status still says whether the check passed).
    pub fn line(&mut self, level: Level, text: impl Into<String>) {
        let text = text.into();
        match level {
            Level::Fail => self.failed += 1,
            Level::Warn => self.warned += 1,
            Level::Pass | Level::Info => {}
        }
        let _ = writeln!(self.out, "{:<5} {text}", level.label());
        let _ = self.out.flush();
        self.lines.push((level, text));
    }

    /// `PASS` line.
    pub fn pass(&mut self, text: impl Into<String>) {
        self.line(Level::Pass, text);
    }

    /// `FAIL` line.
    pub fn fail(&mut self, text: impl Into<String>) {
        self.line(Level::Fail, text);
    }

    /// `WARN` line.
    pub fn warn(&mut self, text: impl Into<String>) {
        self.line(Level::Warn, text);
    }

    /// `INFO` line.
    pub fn info(&mut self, text: impl Into<String>) {
        self.line(Level::Info, text);
    }

    /// Number of `FAIL` lines so far.
    pub fn failed(&self) -> usize {
        self.failed
    }

    /// Every finding so far, in order.
    pub fn lines(&self) -> &[(Level, String)] {
        &self.lines
    }

    /// Print the closing `RESULT:` line; true when nothing failed.
    pub fn finish(&mut self) -> bool {
        let ok = self.failed == 0;
        let _ = writeln!(
            self.out,
            "RESULT: {} ({} failed, {} warnings)",
            if ok { "PASS" } else { "FAIL" },
            self.failed,
            self.warned
        );
        let _ = self.out.flush();
        ok
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn counts_failures_and_prints_each_line_with_its_level() {
        let mut out = Vec::new();
        let mut report = Report::new(&mut out);
        report.pass("a");
        report.warn("b");
        report.fail("c");
        report.info("d");
        assert_eq!(report.failed(), 1);
        assert!(!report.finish());
        let text = String::from_utf8(out).unwrap_or_default();
        assert_eq!(
            text,
            "PASS  a\nWARN  b\nFAIL  c\nINFO  d\nRESULT: FAIL (1 failed, 1 warnings)\n"
        );
    }
}
