//! A bench's settings: environment knobs (each bench's header lists its
//! own), the `PARTS` list, the `--bench` gate and the open-files check.
//! One parser, so a bad value fails the same way in every bench.

use super::process::open_files_limit;

/// `name` parsed from the environment, `default` when unset or blank;
/// a value that does not parse stops the bench (a typo must not silently
/// measure the default).
pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a valid value")),
        _ => default,
    }
}

/// Env var `name` as a comma-separated list, `default` when unset; an
/// item that does not parse stops the bench, as in [`env_or`].
pub(crate) fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|item| {
            item.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: {item:?} is not a value"))
        })
        .collect()
}

/// The comma-separated `PARTS` knob: which parts of a bench to run.
pub(crate) struct Parts(String);

impl Parts {
    pub(crate) fn from_env(default: &str) -> Parts {
        Parts(env_or("PARTS", default.to_owned()))
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.0.split(',').any(|p| p.trim() == name)
    }
}

/// True under `cargo bench`, which passes `--bench`; `cargo test --benches`
/// does not, and a bench is no test: it says so and the caller returns.
pub(crate) fn under_cargo_bench(bench: &str) -> bool {
    let yes = std::env::args().any(|a| a == "--bench");
    if !yes {
        println!(
            "{bench} bench: skipped (run it with `cargo bench -p margin-server --bench {bench}`)"
        );
    }
    yes
}

/// Stops the bench (exit 2) when the open-files limit is under `needed`:
/// failing at once beats a storm of `EMFILE` mid-run. `what` names the
/// knob that asks for them, e.g. `LINKS=1000`.
pub(crate) fn require_open_files(bench: &str, needed: u64, what: &str) {
    match open_files_limit() {
        Some(limit) if limit < needed => {
            eprintln!(
                "{bench} bench: {what} needs about {needed} open files, the limit is {limit}\n\
                 raise it first:  ulimit -n 8192   (or ask for less)"
            );
            std::process::exit(2);
        }
        _ => {}
    }
}
