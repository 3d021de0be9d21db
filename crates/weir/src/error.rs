//! The engine's errors. Each keeps its cause (`#[source]`) and the context a user needs to act:
//! the statement's line, the source or sink by name, and for a bad message its position (file
//! and byte offset, or topic, partition and offset).

use std::path::PathBuf;

use datafusion::error::DataFusionError;
use weir_codec::{CodecError, DecodeError, OptionError};

use crate::sink::SinkError;
use crate::sql::SqlError;

/// Why running a script (or an engine call) failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The script does not parse.
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// A statement failed.
    #[error("statement at line {line}: {source}")]
    Statement {
        /// Where the statement starts (1-based).
        line: u64,
        /// What failed.
        #[source]
        source: StatementError,
    },
    /// Registering an encoding was refused.
    #[error("cannot register encoding '{name}': {reason}")]
    Registry {
        /// The encoding's name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A sink failed while completing its files.
    #[error("{}", named_sink(sink, source))]
    Sink {
        /// The sink.
        sink: String,
        /// The cause.
        #[source]
        source: Box<SinkError>,
    },
}

impl EngineError {
    /// The error of the statement starting at `line`.
    pub(crate) fn at(line: u64, source: impl Into<StatementError>) -> Self {
        Self::Statement {
            line,
            source: source.into(),
        }
    }
}

/// What went wrong in one statement.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    /// A source could not be created or read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A sink could not be created or written.
    #[error("{}", named_sink(sink, source))]
    Sink {
        /// The sink.
        sink: String,
        /// The cause.
        #[source]
        source: Box<SinkError>,
    },
    /// DataFusion refused or failed the query (weir's own errors inside it are unwrapped for
    /// the message).
    #[error("{}", df_message(.0))]
    Query(#[source] Box<DataFusionError>),
    /// The query cannot run on unbounded sources as written.
    #[error("{0}")]
    NotContinuous(String),
    /// The statement itself cannot work (a name already taken, a missing column, ...).
    #[error("{0}")]
    Invalid(String),
    /// A pipeline ended without a result (it panicked).
    #[error("the pipeline of {pipeline} stopped unexpectedly: {reason}; this is a bug in weir")]
    PipelineLost {
        /// The sink or query it fed.
        pipeline: String,
        /// What the runtime reported.
        reason: String,
    },
}

impl From<DataFusionError> for StatementError {
    fn from(e: DataFusionError) -> Self {
        // A source error travels through DataFusion boxed as an external error: bring it back.
        match e {
            DataFusionError::External(inner) => match inner.downcast::<SourceError>() {
                Ok(source) => Self::Source(*source),
                Err(other) => Self::Query(Box::new(DataFusionError::External(other))),
            },
            other => Self::Query(Box::new(other)),
        }
    }
}

/// A source failed: its name and what happened.
#[derive(Debug, thiserror::Error)]
#[error("source {source_name}: {kind}")]
pub struct SourceError {
    /// The source.
    pub source_name: String,
    /// What happened (boxed: a source error travels through the per-message path, which
    /// should return a small `Result`).
    #[source]
    pub kind: Box<SourceErrorKind>,
}

impl SourceError {
    /// `kind` in source `name`.
    pub(crate) fn new(name: &str, kind: impl Into<SourceErrorKind>) -> Self {
        Self {
            source_name: name.to_string(),
            kind: Box::new(kind.into()),
        }
    }

    /// This error as DataFusion carries it through a query.
    pub(crate) fn into_df(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

/// What went wrong in a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceErrorKind {
    /// A message could not be decoded and `'on.error'` is `fail`.
    #[error("cannot decode the message at {position}: {error}; {hint}")]
    BadMessage {
        /// Where the message is (file and byte offset, or topic, partition and offset).
        position: String,
        /// What is wrong with it.
        #[source]
        error: DecodeError,
        /// How to go past bad messages, in the words of what was run.
        hint: &'static str,
    },
    /// A frame or record that holds no message at all (a truncated or corrupt frame, a
    /// tombstone) and `'on.error'` is `fail`.
    #[error("cannot read a message at {position}: {reason}; {hint}")]
    BadFrame {
        /// Where.
        position: String,
        /// What is wrong.
        reason: String,
        /// How to go past it.
        hint: &'static str,
    },
    /// The dead-letter file could not be written.
    #[error("cannot write the dead-letter file {path}: {source}")]
    DeadLetter {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The files could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// The Kafka client failed.
    #[error(transparent)]
    Kafka(#[from] weir_kafka::Error),
    /// The state directory failed.
    #[error(transparent)]
    State(#[from] weir_dedup::DedupError),
    /// An option is missing or wrong.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The encoding could not be set up.
    #[error("encoding '{encoding}': {source}")]
    Encoding {
        /// The encoding's name.
        encoding: String,
        /// The cause.
        #[source]
        source: CodecError,
    },
    /// The columns of the source do not work (a duplicate, a clash, a bad type).
    #[error("{0}")]
    Columns(String),
    /// The schema registry could not give the source's schema.
    #[error(transparent)]
    Registry(#[from] crate::registry::Error),
    /// A thread of the source's pipeline could not start or went away.
    #[error("{0}")]
    Thread(String),
    /// The output of an exactly-once pipeline failed.
    #[error("{}", named_sink(sink, source))]
    Sink {
        /// The sink.
        sink: String,
        /// The cause.
        #[source]
        source: Box<SinkError>,
    },
}

/// A DataFusion error as a user should read it: weir's own errors without DataFusion's wrapping,
/// and DataFusion's on one line.
pub fn df_message(e: &DataFusionError) -> String {
    let text = match e.find_root() {
        DataFusionError::External(inner) => inner.to_string(),
        root => root.to_string(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A problem with the files themselves (not with a message's contents).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The path matches nothing.
    #[error(
        "'path' = '{0}' matches no file (give a file, a directory or a glob such as 'data/*.bin')"
    )]
    NoFiles(String),
    /// Object storage could not be opened or listed, or cannot do what was asked.
    #[error("cannot read '{path}': {reason}")]
    Storage {
        /// The path, as the source gives it.
        path: String,
        /// Why.
        reason: String,
    },
    /// The glob is malformed.
    #[error("'path' = '{path}' is not a valid glob: {reason}")]
    BadGlob {
        /// The pattern.
        path: String,
        /// Why.
        reason: String,
    },
}

/// `source` as the error of sink `sink`: prefixed with the sink's name unless the error names
/// it first already (many of a sink's own errors do, since some reach the user on their own).
fn named_sink(sink: &str, source: &SinkError) -> String {
    let text = source.to_string();
    match text
        .strip_prefix("sink ")
        .and_then(|t| t.strip_prefix(sink))
    {
        Some(rest) if rest.starts_with(": ") => text,
        _ => format!("sink {sink}: {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_is_named_once() {
        let named = SinkError::Options("sink bars: the key is not a column".into());
        let plain = SinkError::Options("the key is not a column".into());
        let other = SinkError::Options("sink barsx: a longer name".into());
        assert_eq!(
            named_sink("bars", &named),
            "sink bars: the key is not a column"
        );
        assert_eq!(
            named_sink("bars", &plain),
            "sink bars: the key is not a column"
        );
        assert_eq!(
            named_sink("bars", &other),
            "sink bars: sink barsx: a longer name"
        );
        let e = StatementError::Sink {
            sink: "bars".into(),
            source: Box::new(named),
        };
        assert_eq!(e.to_string(), "sink bars: the key is not a column");
    }
}
