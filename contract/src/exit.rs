//! Exit statuses the sidecar's subcommands return and its records hold.

/// Exit status recorded for a hook whose command does not exist, and the
/// wrapper's exit status in that case (as a POSIX shell does).
pub const EXIT_COMMAND_NOT_FOUND: i32 = 127;
/// Exit status recorded for a hook whose command exists but cannot be
/// executed (permission denied, bad format), as a POSIX shell does.
pub const EXIT_COMMAND_NOT_EXECUTABLE: i32 = 126;
/// Exit status of every subcommand on a usage error (unknown flag, missing or
/// malformed argument).
pub const EXIT_USAGE: i32 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_pinned() {
        assert_eq!(
            [
                EXIT_COMMAND_NOT_FOUND,
                EXIT_COMMAND_NOT_EXECUTABLE,
                EXIT_USAGE
            ],
            [127, 126, 2]
        );
    }
}
