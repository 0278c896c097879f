//! Process-wide `tracing` subscriber: human-readable text by default, one
//! JSON object per line with `--log-format json`.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (`tracing-subscriber`'s full formatter).
    #[default]
    Text,
    /// One JSON object per line, fields flattened to the top level.
    Json,
}

/// Error while installing the subscriber.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// The level / filter directive does not parse (`RUST_LOG` syntax).
    #[error("invalid log level or filter {filter:?}: {source}")]
    Filter {
        /// The directive as given.
        filter: String,
        /// Parser error.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed.
    #[error("cannot install the log subscriber: {0}")]
    Install(String),
}

/// Install the global subscriber writing to stderr.
///
/// `filter` uses `RUST_LOG` syntax (`info`, `kube_prestop_webhook=debug,info`).
pub fn init(format: LogFormat, filter: &str) -> Result<(), LoggingError> {
    let env_filter = EnvFilter::from_str(filter).map_err(|source| LoggingError::Filter {
        filter: filter.to_owned(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| LoggingError::Install(e.to_string()))
}
