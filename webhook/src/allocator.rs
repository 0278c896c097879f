//! The global allocator's settings: mimalloc ([`mimalloc::MiMalloc`],
//! declared in `main.rs`) returns freed memory to the operating system at
//! once instead of after its purge delay.
//!
//! Why: mimalloc (3.3.2, as vendored by `libmimalloc-sys` 0.1.49) purges
//! freed pages only after `purge_delay`, 1,000 ms by default (its
//! `src/options.c`; the comment in `mimalloc.h` still says 10). A `/mutate`
//! review of the 4 MiB body cap costs a few times its size while it is
//! parsed and answered (about 27 MiB of heap at peak for one, measured with
//! heaptrack on the C library's malloc); under a flood of them
//! those freed buffers were still held when the next ones arrived. The
//! webhook's flood bench (64 connections of 4 MiB reviews for 10 s, this
//! 2-core machine, three runs each) peaked at VmHWM 150–172 MiB with the
//! default delay, over the chart's 128 MiB memory limit, and 96–101 MiB
//! with a delay of 0; the C library's malloc peaked at 83–101 MiB
//! (`docs/figures.md`, issue 25). The throughput of ordinary reviews did
//! not change beyond the run-to-run noise (14–18k req/s either way).

use libmimalloc_sys as sys;

/// `mi_option_purge_delay`'s index in mimalloc's `mi_option_e` (`mimalloc.h`
/// of mimalloc 2.x and 3.x: the 16th entry). `libmimalloc-sys` 0.1.49 binds
/// the function but names no constant for this entry; [`MIMALLOC_VERSION`]
/// pins the header this index was read from.
const MI_OPTION_PURGE_DELAY: sys::mi_option_t = 15;

/// The mimalloc version (`MI_MALLOC_VERSION`: major, two digits of minor,
/// two of patch) whose `mimalloc.h` [`MI_OPTION_PURGE_DELAY`] was read
/// from. A test fails when the linked mimalloc is another one, so that an
/// upgrade re-checks the index.
pub const MIMALLOC_VERSION: i32 = 30302;

/// Sets mimalloc to purge freed memory at once (`purge_delay` 0). Call it
/// first thing in `main`: the option is read on every purge, so it holds
/// from then on.
pub fn purge_freed_memory_at_once() {
    // SAFETY: `mi_option_set` only stores a value in mimalloc's option
    // table (an atomic write); the index is a valid option of the linked
    // version (see MIMALLOC_VERSION).
    unsafe { sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// The linked mimalloc's version (`mi_version()`).
pub fn linked_version() -> i32 {
    // SAFETY: reads a constant; no arguments, no state.
    unsafe { sys::mi_version() }
}

/// The current purge delay in milliseconds (`mi_option_get`).
pub fn purge_delay_ms() -> i64 {
    // SAFETY: reads mimalloc's option table; the index is valid (above).
    unsafe { sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_index_was_read_from_the_linked_mimalloc() {
        assert_eq!(
            linked_version(),
            MIMALLOC_VERSION,
            "mimalloc changed: re-read mi_option_e in its mimalloc.h and update MI_OPTION_PURGE_DELAY"
        );
    }

    #[test]
    fn the_purge_delay_is_set_to_zero() {
        // mimalloc 3.3.2's default for this option (src/options.c): a
        // wrong index would read another option's value here.
        assert_eq!(purge_delay_ms(), 1000);
        purge_freed_memory_at_once();
        assert_eq!(purge_delay_ms(), 0);
    }
}
