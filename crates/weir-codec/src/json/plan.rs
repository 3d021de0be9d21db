//! The decode plan, built once from the column declarations: a tree of object scopes (the root,
//! objects on column paths, struct columns), each with a key matcher precomputed for the keys it
//! wants, and one typed column per Arrow array to fill.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use super::{EpochUnit, JsonDecoderOptions, JsonMismatch};
use crate::columns::{Column, Values};
use crate::error::PlanError;
use crate::ColumnSpec;

/// What a matched key feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The value is one column's value.
    Column(usize),
    /// The value is an object on the path of deeper columns (a node).
    Path(usize),
}

/// How a column reads a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    /// Decimal128(precision, scale): exact, from a number or a numeric string.
    Decimal {
        precision: u8,
        scale: i8,
    },
    /// RFC 3339 text, or a number of `epoch` units since 1970.
    Timestamp {
        unit: TimeUnit,
        epoch: EpochUnit,
    },
    Date32,
    Date64,
    /// Strings unescaped; any other value as its raw JSON text.
    Utf8,
    /// An object whose keys are the children (scope `node`).
    Struct {
        node: usize,
    },
    /// An array of `child` values.
    List {
        child: usize,
    },
    /// An object as entries: `entries` is the struct column of `key` (Utf8) and `value`.
    Map {
        entries: usize,
        key: usize,
        value: usize,
    },
}

/// One column's reading rule and what error messages call it.
#[derive(Debug)]
pub(crate) struct ColDef {
    pub(crate) kind: Kind,
    /// The key path (`order.customer.id`, `items[].price`, `attrs{}`), for errors.
    pub(crate) key: String,
    /// The Arrow type, for errors.
    pub(crate) type_name: String,
}

/// An object scope: the keys it wants and what each feeds.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) matcher: KeyMatcher,
    pub(crate) entries: Vec<Entry>,
    /// Every column this scope fills once per object (transitively through path nodes): what
    /// becomes null when the object is null or absent, and what a duplicate key rolls back.
    pub(crate) leaf_cols: Vec<usize>,
    /// First word of this scope's "seen" bits in the decoder state.
    pub(crate) seen_at: usize,
    /// The key path of the scope, for errors ("" for the root).
    pub(crate) key: String,
}

impl Node {
    pub(crate) fn words(&self) -> usize {
        self.entries.len().div_ceil(64)
    }
}

/// Everything decided at start-up.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) schema: SchemaRef,
    pub(crate) nodes: Vec<Node>,
    pub(crate) cols: Vec<ColDef>,
    /// Empty column buffers, cloned for each decoder.
    pub(crate) templates: Vec<Column>,
    /// Top-level column ids in schema order.
    pub(crate) top: Vec<usize>,
    pub(crate) seen_words: usize,
    pub(crate) max_depth: usize,
    pub(crate) mismatch: JsonMismatch,
}

pub(crate) const ROOT: usize = 0;

// -------------------------------------------------------------------------------------------
// Key matcher
// -------------------------------------------------------------------------------------------

/// Finds a key among the requested ones without hashing a `String`: a multiplicative hash of
/// the key's length and its first and last eight bytes picks a bucket (a seed is searched at
/// start-up so that the requested keys rarely share one), then the candidates of that bucket
/// are compared by length and bytes.
#[derive(Debug, Clone)]
pub(crate) struct KeyMatcher {
    seed: u64,
    shift: u32,
    /// Bucket `b` holds candidates `starts[b]..starts[b + 1]`.
    starts: Vec<u32>,
    cands: Vec<Candidate>,
    arena: Vec<u8>,
}

/// A requested key: its length and first/last words (compared inline, without a `memcmp`
/// call; keys longer than 16 bytes also compare their middle from `arena`).
#[derive(Debug, Clone, Copy)]
struct Candidate {
    head: u64,
    tail: u64,
    len: u32,
    offset: u32,
    entry: u32,
}

#[inline(always)]
fn load(key: &[u8], at: usize, n: usize) -> u64 {
    let mut w = [0u8; 8];
    let src = &key[at..at + n];
    w[..n].copy_from_slice(src);
    u64::from_le_bytes(w)
}

/// The first and last (up to) eight bytes of a key, zero-padded: with the length, they are
/// the whole key for keys of up to 16 bytes.
#[inline(always)]
fn key_words(key: &[u8]) -> (u64, u64) {
    let n = key.len();
    if n >= 8 {
        (load(key, 0, 8), load(key, n - 8, 8))
    } else if n >= 4 {
        (load(key, 0, 4), load(key, n - 4, 4))
    } else {
        (load(key, 0, n), 0)
    }
}

#[inline(always)]
fn key_hash(head: u64, tail: u64, n: usize) -> u64 {
    head ^ tail.rotate_left(31) ^ ((n as u64) << 56)
}

impl KeyMatcher {
    pub(crate) fn new(keys: &[&str]) -> Self {
        let bits = (keys.len().max(1) * 2)
            .next_power_of_two()
            .trailing_zeros()
            .max(3);
        let size = 1usize << bits;
        let shift = 64 - bits;
        let hashes: Vec<u64> = keys
            .iter()
            .map(|k| {
                let (h, t) = key_words(k.as_bytes());
                key_hash(h, t, k.len())
            })
            .collect();
        // Try a few odd multipliers; keep the one with the fewest collisions (usually none).
        let mut best = (usize::MAX, 0u64);
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..64 {
            let mut counts = vec![0u32; size];
            let mut worst = 0usize;
            for &h in &hashes {
                let b = (h.wrapping_mul(seed) >> shift) as usize;
                counts[b] += 1;
                worst += (counts[b] > 1) as usize;
            }
            if worst < best.0 {
                best = (worst, seed);
            }
            if worst == 0 {
                break;
            }
            seed = seed
                .wrapping_mul(0xBF58_476D_1CE4_E5B9)
                .wrapping_add(0x94D0_49BB_1331_11EB)
                | 1;
        }
        let seed = best.1;
        let mut by_bucket: Vec<(usize, usize)> = hashes
            .iter()
            .enumerate()
            .map(|(i, &h)| ((h.wrapping_mul(seed) >> shift) as usize, i))
            .collect();
        by_bucket.sort_unstable();
        let mut starts = vec![0u32; size + 1];
        let mut cands = Vec::with_capacity(keys.len());
        let mut arena = Vec::new();
        for &(b, i) in &by_bucket {
            starts[b + 1] += 1;
            let key = keys[i].as_bytes();
            let (head, tail) = key_words(key);
            cands.push(Candidate {
                head,
                tail,
                len: key.len() as u32,
                offset: arena.len() as u32,
                entry: i as u32,
            });
            arena.extend_from_slice(key);
        }
        for b in 0..size {
            starts[b + 1] += starts[b];
        }
        Self {
            seed,
            shift,
            starts,
            cands,
            arena,
        }
    }

    /// The entry index of `key`, if it is requested.
    #[inline(always)]
    pub(crate) fn find(&self, key: &[u8]) -> Option<usize> {
        let n = key.len();
        let (head, tail) = key_words(key);
        let b = (key_hash(head, tail, n).wrapping_mul(self.seed) >> self.shift) as usize;
        let (lo, hi) = (
            *self.starts.get(b)? as usize,
            *self.starts.get(b + 1)? as usize,
        );
        for c in self.cands.get(lo..hi)? {
            if c.head == head && c.tail == tail && c.len as usize == n {
                if n <= 16 {
                    return Some(c.entry as usize);
                }
                let off = c.offset as usize;
                if self.arena.get(off + 8..off + n - 8) == key.get(8..n - 8) {
                    return Some(c.entry as usize);
                }
            }
        }
        None
    }
}

// -------------------------------------------------------------------------------------------
// Building
// -------------------------------------------------------------------------------------------

/// A path tree under construction.
#[derive(Default)]
struct PathTree {
    /// (key, what it holds), in declaration order.
    children: Vec<(String, PathChild)>,
}

enum PathChild {
    /// Index into the column specs.
    Leaf(usize),
    Tree(PathTree),
}

struct Builder<'a> {
    nodes: Vec<Node>,
    cols: Vec<ColDef>,
    templates: Vec<Column>,
    seen_words: usize,
    options: &'a JsonDecoderOptions,
    batch_size: usize,
}

pub(crate) fn build(
    columns: &[ColumnSpec],
    options: &JsonDecoderOptions,
) -> Result<Plan, PlanError> {
    if options.batch_size == 0 {
        return Err(PlanError::Options("batch_size must be at least 1".into()));
    }
    if options.max_depth == 0 || options.max_depth > super::MAX_DEPTH_LIMIT {
        return Err(PlanError::Options(format!(
            "max_depth must be between 1 and {}",
            super::MAX_DEPTH_LIMIT
        )));
    }
    for (name, _) in &options.timestamp_units {
        match columns.iter().find(|c| &c.name == name) {
            Some(c) if matches!(c.data_type, DataType::Timestamp(_, _)) => {}
            Some(c) => {
                return Err(PlanError::Options(format!(
                    "timestamp unit given for column '{name}', which is {} (not a Timestamp)",
                    c.data_type
                )))
            }
            None => {
                return Err(PlanError::Options(format!(
                    "timestamp unit given for column '{name}', which is not declared"
                )))
            }
        }
    }

    // The path tree: every column is a leaf at the end of its path.
    let mut tree = PathTree::default();
    for (i, spec) in columns.iter().enumerate() {
        if columns[..i].iter().any(|c| c.name == spec.name) {
            return Err(PlanError::Conflict {
                column: spec.name.clone(),
                reason: "the column name is declared twice".into(),
            });
        }
        let path = spec.path.as_deref().unwrap_or(&spec.name);
        let segments: Vec<&str> = match &spec.path {
            Some(p) => p.split('.').collect(),
            None => vec![spec.name.as_str()],
        };
        if segments.iter().any(|s| s.is_empty()) {
            return Err(PlanError::BadPath {
                column: spec.name.clone(),
                path: path.to_string(),
                field: String::new(),
                reason: "a path segment is empty".into(),
            });
        }
        insert(&mut tree, &segments, i, spec, path, columns)?;
    }

    let mut b = Builder {
        nodes: Vec::new(),
        cols: Vec::new(),
        templates: Vec::new(),
        seen_words: 0,
        options,
        batch_size: options.batch_size,
    };
    let mut top = vec![usize::MAX; columns.len()];
    let mut fields = vec![None; columns.len()];
    b.path_node(&tree, "", columns, &mut top, &mut fields)?;
    let fields: Vec<Field> = fields.into_iter().flatten().collect();
    Ok(Plan {
        schema: Arc::new(Schema::new(fields)),
        nodes: b.nodes,
        cols: b.cols,
        templates: b.templates,
        top,
        seen_words: b.seen_words,
        max_depth: options.max_depth,
        mismatch: options.mismatch,
    })
}

fn insert(
    tree: &mut PathTree,
    segments: &[&str],
    spec_index: usize,
    spec: &ColumnSpec,
    path: &str,
    columns: &[ColumnSpec],
) -> Result<(), PlanError> {
    let conflict = |other: usize| PlanError::Conflict {
        column: spec.name.clone(),
        reason: format!(
            "its path '{path}' overlaps the path of column '{}'; read the enclosing object as \
             one Struct or Utf8 column instead",
            columns[other].name
        ),
    };
    let (first, rest) = match segments.split_first() {
        Some(x) => x,
        None => return Ok(()),
    };
    let pos = tree.children.iter().position(|(k, _)| k == first);
    if rest.is_empty() {
        return match pos {
            None => {
                tree.children
                    .push((first.to_string(), PathChild::Leaf(spec_index)));
                Ok(())
            }
            Some(p) => Err(conflict(first_leaf(&tree.children[p].1))),
        };
    }
    let p = match pos {
        Some(p) => p,
        None => {
            tree.children
                .push((first.to_string(), PathChild::Tree(PathTree::default())));
            tree.children.len() - 1
        }
    };
    match &mut tree.children[p].1 {
        PathChild::Leaf(other) => Err(conflict(*other)),
        PathChild::Tree(sub) => insert(sub, rest, spec_index, spec, path, columns),
    }
}

fn first_leaf(child: &PathChild) -> usize {
    match child {
        PathChild::Leaf(i) => *i,
        PathChild::Tree(t) => t.children.first().map_or(0, |(_, c)| first_leaf(c)),
    }
}

impl Builder<'_> {
    fn new_node(&mut self, keys: &[&str], key: String) -> usize {
        let id = self.nodes.len();
        let words = keys.len().div_ceil(64);
        self.nodes.push(Node {
            matcher: KeyMatcher::new(keys),
            entries: Vec::with_capacity(keys.len()),
            leaf_cols: Vec::new(),
            seen_at: self.seen_words,
            key,
        });
        self.seen_words += words;
        id
    }

    /// A scope for a path tree; its leaves are top-level columns.
    fn path_node(
        &mut self,
        tree: &PathTree,
        prefix: &str,
        columns: &[ColumnSpec],
        top: &mut [usize],
        fields: &mut [Option<Field>],
    ) -> Result<usize, PlanError> {
        let keys: Vec<&str> = tree.children.iter().map(|(k, _)| k.as_str()).collect();
        let id = self.new_node(&keys, prefix.to_string());
        let mut leaf_cols = Vec::new();
        for (k, child) in &tree.children {
            let entry = match child {
                PathChild::Leaf(i) => {
                    let spec = &columns[*i];
                    let key = spec.path.clone().unwrap_or_else(|| spec.name.clone());
                    let (col, dt) = self.column(&spec.data_type, key, &spec.name)?;
                    top[*i] = col;
                    fields[*i] = Some(Field::new(&spec.name, dt, true));
                    leaf_cols.push(col);
                    Entry::Column(col)
                }
                PathChild::Tree(sub) => {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    let n = self.path_node(sub, &key, columns, top, fields)?;
                    leaf_cols.extend_from_slice(&self.nodes[n].leaf_cols);
                    Entry::Path(n)
                }
            };
            self.nodes[id].entries.push(entry);
        }
        self.nodes[id].leaf_cols = leaf_cols;
        Ok(id)
    }

    /// Plans one column of type `dt` (and its children); returns its id and the Arrow type it
    /// produces (every nested field nullable, since any JSON value may be null or absent).
    fn column(
        &mut self,
        dt: &DataType,
        key: String,
        column: &str,
    ) -> Result<(usize, DataType), PlanError> {
        let unsupported = |what: String| PlanError::Unsupported {
            column: column.to_string(),
            what,
        };
        let id = self.cols.len();
        // Reserve the id first so that children get larger ids.
        self.cols.push(ColDef {
            kind: Kind::Bool,
            key: key.clone(),
            type_name: dt.to_string(),
        });
        self.templates.push(Column::new(
            Values::Bool(Default::default()),
            DataType::Null,
            0,
        ));
        let capacity = if key.contains('[') || key.contains('{') {
            0
        } else {
            self.batch_size
        };
        let (kind, values, out_type) = match dt {
            DataType::Boolean => (Kind::Bool, Values::Bool(Default::default()), dt.clone()),
            DataType::Int8 => (Kind::I8, Values::I8(Vec::new()), dt.clone()),
            DataType::Int16 => (Kind::I16, Values::I16(Vec::new()), dt.clone()),
            DataType::Int32 => (Kind::I32, Values::I32(Vec::new()), dt.clone()),
            DataType::Int64 => (Kind::I64, Values::I64(Vec::new()), dt.clone()),
            DataType::UInt8 => (Kind::U8, Values::U8(Vec::new()), dt.clone()),
            DataType::UInt16 => (Kind::U16, Values::U16(Vec::new()), dt.clone()),
            DataType::UInt32 => (Kind::U32, Values::U32(Vec::new()), dt.clone()),
            DataType::UInt64 => (Kind::U64, Values::U64(Vec::new()), dt.clone()),
            DataType::Float32 => (Kind::F32, Values::F32(Vec::new()), dt.clone()),
            DataType::Float64 => (Kind::F64, Values::F64(Vec::new()), dt.clone()),
            DataType::Decimal128(p, s) => {
                if *p == 0 || *p > 38 || *s < 0 || *s as u8 > *p {
                    return Err(unsupported(format!(
                        "{dt} (weir reads Decimal128 with 1 <= precision <= 38 and \
                         0 <= scale <= precision)"
                    )));
                }
                (
                    Kind::Decimal {
                        precision: *p,
                        scale: *s,
                    },
                    Values::I128(Vec::new()),
                    dt.clone(),
                )
            }
            DataType::Timestamp(unit, _) => {
                let epoch = self
                    .options
                    .timestamp_units
                    .iter()
                    .rev()
                    .find(|(n, _)| n == column && !key.contains(['[', '{']))
                    .map(|(_, u)| *u)
                    .unwrap_or(EpochUnit::from_time_unit(*unit));
                (
                    Kind::Timestamp { unit: *unit, epoch },
                    Values::I64(Vec::new()),
                    dt.clone(),
                )
            }
            DataType::Date32 => (Kind::Date32, Values::I32(Vec::new()), dt.clone()),
            DataType::Date64 => (Kind::Date64, Values::I64(Vec::new()), dt.clone()),
            DataType::Utf8 => (
                Kind::Utf8,
                Values::Bytes {
                    offsets: Vec::new(),
                    data: Vec::new(),
                },
                dt.clone(),
            ),
            DataType::Struct(children) => {
                let keys: Vec<&str> = children.iter().map(|f| f.name().as_str()).collect();
                for (i, k) in keys.iter().enumerate() {
                    if keys[..i].contains(k) {
                        return Err(PlanError::Conflict {
                            column: column.to_string(),
                            reason: format!("struct field '{k}' is declared twice"),
                        });
                    }
                }
                let node = self.new_node(&keys, key.clone());
                let mut out = Vec::with_capacity(children.len());
                let mut ids = Vec::with_capacity(children.len());
                for f in children.iter() {
                    let (c, t) =
                        self.column(f.data_type(), format!("{key}.{}", f.name()), column)?;
                    self.nodes[node].entries.push(Entry::Column(c));
                    ids.push(c);
                    out.push(Field::new(f.name(), t, true).with_metadata(f.metadata().clone()));
                }
                self.nodes[node].leaf_cols = ids.clone();
                (
                    Kind::Struct { node },
                    Values::Struct {
                        children: ids,
                        len: 0,
                    },
                    DataType::Struct(Fields::from(out)),
                )
            }
            DataType::List(item) => {
                let (child, t) = self.column(item.data_type(), format!("{key}[]"), column)?;
                (
                    Kind::List { child },
                    Values::List {
                        offsets: Vec::new(),
                        child,
                    },
                    DataType::List(Arc::new(Field::new(item.name(), t, true))),
                )
            }
            DataType::Map(entries, sorted) => {
                if *sorted {
                    return Err(unsupported(
                        "a sorted Map (weir keeps the keys in input order; declare it unsorted)"
                            .into(),
                    ));
                }
                let DataType::Struct(kv) = entries.data_type() else {
                    return Err(unsupported(format!(
                        "a Map whose entries are {}",
                        entries.data_type()
                    )));
                };
                if kv.len() != 2 || kv[0].data_type() != &DataType::Utf8 {
                    return Err(unsupported(
                        "a Map whose entries are not Struct(key: Utf8, value)".into(),
                    ));
                }
                let entries_id = self.cols.len();
                self.cols.push(ColDef {
                    kind: Kind::Bool,
                    key: format!("{key}{{}}"),
                    type_name: entries.data_type().to_string(),
                });
                self.templates.push(Column::new(
                    Values::Bool(Default::default()),
                    DataType::Null,
                    0,
                ));
                let (kc, kt) = self.column(&DataType::Utf8, format!("{key}{{}}"), column)?;
                let (vc, vt) = self.column(kv[1].data_type(), format!("{key}{{}}"), column)?;
                let kf = Field::new(kv[0].name(), kt, false);
                let vf = Field::new(kv[1].name(), vt, true);
                let entries_type = DataType::Struct(Fields::from(vec![kf, vf]));
                // The entries struct is never null; it is filled by the Map reader directly.
                self.cols[entries_id].type_name = entries_type.to_string();
                self.templates[entries_id] = Column::new(
                    Values::Struct {
                        children: vec![kc, vc],
                        len: 0,
                    },
                    entries_type.clone(),
                    0,
                );
                (
                    Kind::Map {
                        entries: entries_id,
                        key: kc,
                        value: vc,
                    },
                    Values::List {
                        offsets: Vec::new(),
                        child: entries_id,
                    },
                    DataType::Map(
                        Arc::new(Field::new(entries.name(), entries_type, false)),
                        false,
                    ),
                )
            }
            other => {
                return Err(unsupported(format!(
                    "Arrow type {other} (the JSON decoder reads Boolean, Int8..Int64, \
                     UInt8..UInt64, Float32, Float64, Decimal128, Timestamp, Date32, Date64, \
                     Utf8, Struct, List and Map)"
                )))
            }
        };
        self.cols[id].kind = kind;
        self.templates[id] = Column::new(values, out_type.clone(), capacity);
        Ok((id, out_type))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matcher_finds_exactly_the_requested_keys() {
        let keys: Vec<String> = (0..200).map(|i| format!("key_number_{i}_suffix")).collect();
        let mut refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        refs.extend(["", "a", "ab", "abc", "abcd", "abcdefgh", "abcdefghi"]);
        let m = KeyMatcher::new(&refs);
        for (i, k) in refs.iter().enumerate() {
            assert_eq!(m.find(k.as_bytes()), Some(i), "{k}");
        }
        for k in [
            "key_number_200_suffix",
            "abcde",
            "b",
            "key_number_1_suffiy",
            "abcdefgi",
        ] {
            assert_eq!(m.find(k.as_bytes()), None, "{k}");
        }
        let empty = KeyMatcher::new(&[]);
        assert_eq!(empty.find(b"x"), None);
    }
}
