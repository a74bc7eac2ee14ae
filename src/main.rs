//! The `cuzk` command: `srs`, `prove`, `bench`, `gen-c1`, `daemon` (see `cuzk --help`
//! and src/cli/). Here: the allocator, parsing, logging, dispatch and the exit.

#![deny(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc (Cargo feature `mimalloc`, default): the 16
/// synthesis threads of a PoRep stream spend their time in bellperson gadgets that
/// allocate and free small vectors by the million (docs/benchmarks.md, "2026-11-30:
/// overlapped MSMs, warm-up, prefetch, mimalloc").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let cfg = match cli::load_config(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            return ExitCode::from(2);
        }
    };
    cuzk::logging::init(&cfg.log);
    let ok = match cli.run(&cfg) {
        Ok(code) => code == ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            false
        }
    };
    exit_now(ok)
}

/// The error and its causes, each said once: many errors already include their
/// source in their own message (`path: No such file or directory`).
fn message(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    msg
}

/// Ends the process with status 0 (`ok`) or 1 without running atexit handlers. The
/// CUDA runtime tears its context down in one, while threads of the stopped engine
/// may still be releasing pinned buffers or device memory: on the H200 that crashed
/// 1 run in 8 with SIGSEGV after the results were printed. Everything the process
/// holds is the OS's to reclaim; output is flushed first.
#[allow(unsafe_code)]
fn exit_now(ok: bool) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: two libc calls with no preconditions on Rust state. fflush(NULL) flushes
    // every C stdio output stream (CUDA/sppark may printf), locking each as POSIX
    // requires, so other threads' stdio use stays safe. _exit ends the process at once:
    // no Rust code, destructor or atexit handler runs after it, so skipping them can
    // leak but cannot leave anything observable in a broken state.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(if ok { 0 } else { 1 })
    }
}
