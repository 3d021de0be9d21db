//! `WITH` options, declared once and parsed from their declaration.
//!
//! Every connector, encoding and sink declares the options it accepts as [`OptionSpec`]
//! constants (key, kind of value, default, one line of documentation) and reads them through
//! [`Options`]' typed getters, which take the declaration: the default, the accepted values and
//! the error message all come from one place. The engine finds unknown keys by comparing what a
//! statement gives with the declarations ([`unknown_keys`]), and the README's option tables are
//! rendered from them ([`markdown_table`]) and checked by a test.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// What values an option takes (for its parsing and its documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// Any text.
    Text,
    /// A path to a file or directory.
    Path,
    /// `true` or `false`.
    Bool,
    /// A whole number.
    Count,
    /// A size: `64MB`, `512KiB`, `1048576`.
    Bytes,
    /// A duration: `250ms`, `5s`, `15m`, `1h`, `7d`.
    Duration,
    /// One of a fixed set of words (matched without regard to case).
    Choice(&'static [&'static str]),
    /// Several values separated by commas.
    List,
}

impl OptionKind {
    /// The values column of the documentation.
    pub fn describe(self) -> String {
        match self {
            Self::Text => "text".into(),
            Self::Path => "a path".into(),
            Self::Bool => "`true`, `false`".into(),
            Self::Count => "a number".into(),
            Self::Bytes => "a size (`64MB`)".into(),
            Self::Duration => "a duration (`5s`)".into(),
            Self::Choice(words) => words
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", "),
            Self::List => "a comma-separated list".into(),
        }
    }
}

/// One option a connector, encoding or sink accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    /// The key. A key ending in `<column>` (`fields.<column>`) stands for a family: every key
    /// with the part before `<` as its prefix.
    pub key: &'static str,
    /// Its values.
    pub kind: OptionKind,
    /// The value used when it is absent, as a user would write it; `None` when there is none.
    pub default: Option<&'static str>,
    /// One line saying what it does.
    pub doc: &'static str,
    /// Passwords, tokens and keys: the value never appears in a message.
    pub secret: bool,
}

impl OptionSpec {
    /// An option without a default.
    pub const fn new(key: &'static str, kind: OptionKind, doc: &'static str) -> Self {
        Self {
            key,
            kind,
            default: None,
            doc,
            secret: false,
        }
    }

    /// The same option with a default.
    pub const fn default_value(mut self, default: &'static str) -> Self {
        self.default = Some(default);
        self
    }

    /// The same option, secret: its value is never shown.
    pub const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// The prefix of a family (`fields.` for `fields.<column>`), `None` for a plain key.
    pub fn family_prefix(&self) -> Option<&'static str> {
        self.key.find('<').map(|i| &self.key[..i])
    }

    /// True when `key` is this option (or a member of this family).
    pub fn matches(&self, key: &str) -> bool {
        match self.family_prefix() {
            Some(prefix) => key.len() > prefix.len() && key.starts_with(prefix),
            None => key == self.key,
        }
    }
}

/// An option that is missing or has a value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// A required option is absent.
    #[error("option '{key}' is required: {doc}")]
    Missing {
        /// The option.
        key: String,
        /// What it is for.
        doc: &'static str,
    },
    /// A value does not parse.
    #[error("option '{key}' = {shown}: expected {expected}")]
    Invalid {
        /// The option.
        key: String,
        /// The value in quotes, or a placeholder for a secret.
        shown: String,
        /// What is accepted.
        expected: String,
    },
    /// Keys nothing declares (usually a typo).
    #[error("unknown option(s) {}; the options here are: {known}", quoted(.keys))]
    Unknown {
        /// The unknown keys.
        keys: Vec<String>,
        /// The declared keys, for the message.
        known: String,
    },
    /// Two options that do not go together, or one that needs another.
    #[error("{0}")]
    Conflict(String),
}

fn quoted(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl OptionError {
    /// `value` of `spec` does not parse as `expected`.
    pub fn invalid(spec: &OptionSpec, key: &str, value: &str, expected: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.to_string(),
            shown: if spec.secret {
                "(secret, not shown)".into()
            } else {
                format!("'{value}'")
            },
            expected: expected.into(),
        }
    }
}

/// The `WITH` options of a source or sink, as text, read through their declarations.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Options {
    values: BTreeMap<String, String>,
}

/// Shows the keys only: values may be secrets resolved from `${env:...}` or `${file:...}`.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("keys", &self.values.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Options from key/value pairs; a later duplicate key replaces an earlier one.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            values: pairs.into_iter().collect(),
        }
    }

    /// True when no option was given.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value given for `spec`'s key, if any (no default).
    pub fn given(&self, spec: &OptionSpec) -> Option<&str> {
        self.values.get(spec.key).map(String::as_str)
    }

    /// The value of `spec`, or its default.
    pub fn text(&self, spec: &OptionSpec) -> Option<&str> {
        self.given(spec).or(spec.default)
    }

    /// The value of `spec`, its default, or an error naming it.
    pub fn require(&self, spec: &OptionSpec) -> Result<&str, OptionError> {
        self.text(spec).ok_or_else(|| OptionError::Missing {
            key: spec.key.to_string(),
            doc: spec.doc,
        })
    }

    /// The value of `spec` (or its default) parsed as `T`; `expected` describes `T` for the
    /// error.
    pub fn parse<T: FromStr>(
        &self,
        spec: &OptionSpec,
        expected: &str,
    ) -> Result<Option<T>, OptionError> {
        self.text(spec)
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| OptionError::invalid(spec, spec.key, v, expected))
            })
            .transpose()
    }

    /// A whole number (or the default).
    pub fn count(&self, spec: &OptionSpec) -> Result<Option<u64>, OptionError> {
        self.parse(spec, "a whole number")
    }

    /// A duration such as `90s`, `15m`, `1h` or `250ms` (or the default), for
    /// [`OptionKind::Duration`] options.
    pub fn duration(&self, spec: &OptionSpec) -> Result<Option<std::time::Duration>, OptionError> {
        self.text(spec)
            .map(|t| parse_duration(t).map_err(|why| OptionError::invalid(spec, spec.key, t, why)))
            .transpose()
    }

    /// A size such as `64MB` or `1GiB` in bytes (or the default).
    pub fn bytes(&self, spec: &OptionSpec) -> Result<Option<usize>, OptionError> {
        self.text(spec)
            .map(|t| parse_bytes(t).map_err(|why| OptionError::invalid(spec, spec.key, t, why)))
            .transpose()
    }

    /// `true` or `false` (or the default; `false` when there is none).
    pub fn flag(&self, spec: &OptionSpec) -> Result<bool, OptionError> {
        match self.text(spec) {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(OptionError::invalid(spec, spec.key, v, "'true' or 'false'")),
        }
    }

    /// One of the words of a [`OptionKind::Choice`] (or the default), lower-cased.
    pub fn choice(&self, spec: &OptionSpec) -> Result<Option<&'static str>, OptionError> {
        let OptionKind::Choice(words) = spec.kind else {
            return Err(OptionError::Conflict(format!(
                "option '{}' is not declared as a choice (a bug in its declaration)",
                spec.key
            )));
        };
        self.text(spec)
            .map(|v| {
                words
                    .iter()
                    .find(|w| w.eq_ignore_ascii_case(v.trim()))
                    .copied()
                    .ok_or_else(|| {
                        let words: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
                        OptionError::invalid(
                            spec,
                            spec.key,
                            v,
                            format!("one of {}", words.join(", ")),
                        )
                    })
            })
            .transpose()
    }

    /// A comma-separated list (empty items dropped); empty when absent.
    pub fn list(&self, spec: &OptionSpec) -> Vec<String> {
        self.text(spec)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The members of a family (`fields.<column>`): each key's part after the prefix, and its
    /// value, in key order.
    pub fn family(&self, spec: &OptionSpec) -> Vec<(String, String)> {
        let Some(prefix) = spec.family_prefix() else {
            return Vec::new();
        };
        self.values
            .iter()
            .filter(|(k, _)| spec.matches(k))
            .map(|(k, v)| (k[prefix.len()..].to_string(), v.clone()))
            .collect()
    }

    /// All options, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Replaces the value of `key`.
    pub fn set(&mut self, key: &str, value: String) {
        self.values.insert(key.to_string(), value);
    }
}

/// Resolves the references in option values, so that secrets need not be written in a SQL
/// file: every `${env:NAME}` becomes the environment variable `NAME`, every `${file:PATH}` the
/// contents of the file `PATH` (without a final newline). An error names the option and what
/// it refers to, never a value.
pub fn resolve_references(
    pairs: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(String, String)>, OptionError> {
    pairs
        .into_iter()
        .map(|(key, value)| {
            let resolved = resolve_value(&key, &value)?;
            Ok((key, resolved))
        })
        .collect()
}

fn resolve_value(key: &str, value: &str) -> Result<String, OptionError> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 2..];
        let Some(end) = tail.find('}') else {
            return Err(OptionError::Conflict(format!(
                "option '{key}': a '${{' reference is not closed with '}}'"
            )));
        };
        let reference = &tail[..end];
        match reference.split_once(':') {
            Some(("env", name)) => match std::env::var(name) {
                Ok(v) => out.push_str(&v),
                Err(_) => {
                    return Err(OptionError::Conflict(format!(
                        "option '{key}' refers to the environment variable {name}, which is not \
                         set (or not valid UTF-8)"
                    )))
                }
            },
            Some(("file", path)) => match std::fs::read_to_string(path) {
                Ok(v) => out.push_str(v.strip_suffix('\n').unwrap_or(&v).trim_end_matches('\r')),
                Err(e) => {
                    return Err(OptionError::Conflict(format!(
                        "option '{key}' refers to the file {path}, which cannot be read: {e}"
                    )))
                }
            },
            _ => {
                return Err(OptionError::Conflict(format!(
                    "option '{key}': '${{{reference}}}' is not a reference; write ${{env:NAME}} \
                     or ${{file:PATH}}"
                )))
            }
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The keys of `options` that no declaration in `declared` accepts, as an error listing what is
/// accepted; `Ok` when there are none.
pub fn unknown_keys(options: &Options, declared: &[&[OptionSpec]]) -> Result<(), OptionError> {
    let keys: Vec<String> = options
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !declared.iter().flat_map(|d| d.iter()).any(|s| s.matches(k)))
        .map(str::to_string)
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    let mut known: Vec<&str> = declared
        .iter()
        .flat_map(|d| d.iter())
        .map(|s| s.key)
        .collect();
    known.sort_unstable();
    known.dedup();
    Err(OptionError::Unknown {
        keys,
        known: known.join(", "),
    })
}

/// The declarations as the rows of a Markdown table (`| option | values | default | meaning |`),
/// one a line, as the README shows them.
pub fn markdown_table(declared: &[OptionSpec]) -> String {
    let mut out = String::from("| option | values | default | meaning |\n|---|---|---|---|\n");
    for s in declared {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            s.key,
            s.kind.describe(),
            s.default.map_or(String::new(), |d| format!("`{d}`")),
            s.doc
        ));
    }
    out
}

impl fmt::Display for OptionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key)
    }
}

/// Parses a duration such as `90s`, `15m`, `1h`, `7d` or `250ms` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration; write for example '90s', '15m' or '1h'"))?;
    let secs = match unit.trim() {
        "ms" => return Ok(std::time::Duration::from_millis(n)),
        "" | "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        u => {
            return Err(format!(
                "'{s}': unknown time unit '{u}'; use ms, s, m, h or d"
            ))
        }
    };
    Ok(std::time::Duration::from_secs(n.saturating_mul(secs)))
}

/// Parses a size such as `64MB`, `512KiB`, `1g` or `1048576` (bytes).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size; write for example '64MB' or '1GB'"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        u => return Err(format!("'{s}': unknown size unit '{u}'; use KB, MB or GB")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_keys_not_values() {
        let o = Options::new([("sasl.password".to_string(), "hunter2".to_string())]);
        let shown = format!("{o:?}");
        assert!(shown.contains("sasl.password"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    const NAME: OptionSpec = OptionSpec::new("name", OptionKind::Text, "a name");
    const MODE: OptionSpec =
        OptionSpec::new("mode", OptionKind::Choice(&["fast", "safe"]), "how").default_value("safe");
    const FIELDS: OptionSpec = OptionSpec::new("fields.<column>", OptionKind::Text, "a path");
    const TOKEN: OptionSpec = OptionSpec::new("token", OptionKind::Count, "a token").secret();

    fn options(pairs: &[(&str, &str)]) -> Options {
        Options::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn typed_reads_use_the_declaration() {
        let o = options(&[("mode", "FAST"), ("fields.a", "x.y"), ("fields.b", "z")]);
        assert_eq!(o.choice(&MODE).unwrap(), Some("fast"));
        assert_eq!(options(&[]).choice(&MODE).unwrap(), Some("safe"));
        assert_eq!(
            o.family(&FIELDS),
            vec![("a".into(), "x.y".into()), ("b".into(), "z".into())]
        );
        let e = options(&[]).require(&NAME).unwrap_err();
        assert_eq!(e.to_string(), "option 'name' is required: a name");
        let e = options(&[("mode", "slow")]).choice(&MODE).unwrap_err();
        assert_eq!(
            e.to_string(),
            "option 'mode' = 'slow': expected one of 'fast', 'safe'"
        );
    }

    #[test]
    fn secrets_are_never_shown() {
        let e = options(&[("token", "hunter2")]).count(&TOKEN).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn references_resolve_from_the_environment_and_files() {
        let dir = std::env::temp_dir().join(format!("weir-options-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "s3cret\n").unwrap();
        // PATH is set in every test environment.
        let path = std::env::var("PATH").unwrap();
        let pairs = vec![
            ("a".to_string(), format!("${{file:{}}}", file.display())),
            ("b".to_string(), "x-${env:PATH}-y".to_string()),
            ("c".to_string(), "plain".to_string()),
        ];
        let got = resolve_references(pairs).unwrap();
        assert_eq!(got[0].1, "s3cret");
        assert_eq!(got[1].1, format!("x-{path}-y"));
        assert_eq!(got[2].1, "plain");
        let e = resolve_references(vec![("pw".into(), "${env:WEIR_NO_SUCH_VAR_1}".into())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'pw'") && e.contains("WEIR_NO_SUCH_VAR_1"),
            "{e}"
        );
        let e = resolve_references(vec![("pw".into(), "${vault:x}".into())]).unwrap_err();
        assert!(e.to_string().contains("not a reference"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_keys_come_from_the_declarations() {
        let declared: &[OptionSpec] = &[NAME, MODE, FIELDS];
        assert!(unknown_keys(&options(&[("name", "n"), ("fields.c", "p")]), &[declared]).is_ok());
        let e =
            unknown_keys(&options(&[("nmae", "n"), ("fields.", "p")]), &[declared]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown option(s) 'fields.', 'nmae'; the options here are: fields.<column>, mode, name"
        );
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("1h").unwrap().as_secs(), 3600);
        assert_eq!(parse_duration("250ms").unwrap().as_millis(), 250);
        assert_eq!(parse_duration("90").unwrap().as_secs(), 90);
        assert!(parse_duration("1 fortnight").is_err());
        assert!(parse_duration("h").is_err());
        assert_eq!(parse_bytes("64MB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1g").unwrap(), 1 << 30);
        assert!(parse_bytes("12 parsecs").is_err());
        const T: OptionSpec =
            OptionSpec::new("t", OptionKind::Duration, "a time").default_value("5s");
        let given = Options::new([("t".to_string(), "2m".to_string())]);
        assert_eq!(
            given.duration(&T).unwrap(),
            Some(std::time::Duration::from_secs(120))
        );
        assert_eq!(
            Options::default().duration(&T).unwrap(),
            Some(std::time::Duration::from_secs(5))
        );
        let bad = Options::new([("t".to_string(), "soon".to_string())]);
        assert!(bad.duration(&T).unwrap_err().to_string().contains("'t'"));
    }
}
