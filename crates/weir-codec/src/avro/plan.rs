//! The decode plan of one writer schema onto the declared columns, compiled once: a table of
//! operations, one per value the writer's schema puts on the wire, each saying how to read the
//! value (or skip it) and which column receives it. Avro carries no tags, so a record is the
//! straight sequence of its fields' operations; a declared column the writer lacks gets a fill
//! operation after them.

use std::collections::{HashMap, HashSet};
use std::mem::{discriminant, Discriminant};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, IntervalUnit, Schema, SchemaRef, TimeUnit};

use serde_json::Value;

use super::schema::{timestamp, AvroSchema, Logical, Node, NodeId, RecordField};
use crate::columns::{Bits, Column, Values};
use crate::error::PlanError;
use crate::ColumnSpec;

/// The deepest nesting `'avro.max.depth'` may allow: each level is a frame of the recursive
/// reader, and a thread's stack is finite.
pub(crate) const MAX_DEPTH_LIMIT: usize = 1024;

/// No column (a value read only to be skipped).
pub(crate) const NONE: u32 = u32::MAX;

/// How an Avro `int` or `long` is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Num {
    I32,
    I64,
    F32,
    F64,
    /// Into an i64 column, multiplied (a finer time unit), overflow checked.
    Mul(i64),
}

/// One operation; see the module docs. `path` indexes [`Plan::paths`] (the field path, for
/// errors).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// A writer `null`, or a union's null branch: a null in each column of list `cols`.
    Null {
        cols: u32,
    },
    Bool {
        col: u32,
        path: u32,
    },
    Int {
        col: u32,
        to: Num,
        path: u32,
    },
    Long {
        col: u32,
        to: Num,
        path: u32,
    },
    Float {
        col: u32,
        to: Num,
        path: u32,
    },
    Double {
        col: u32,
        path: u32,
    },
    /// `string` or `bytes` into a Utf8 (`utf8`, validated) or Binary column.
    Bytes {
        col: u32,
        utf8: bool,
        path: u32,
    },
    /// `fixed` into a Binary column.
    Fixed {
        col: u32,
        size: u32,
        path: u32,
    },
    /// A decimal (`size` 0: length-prefixed bytes; else a fixed of `size`) into Decimal128, or
    /// Decimal256 where `wide`.
    Decimal {
        wide: bool,
        col: u32,
        size: u32,
        precision: u8,
        path: u32,
    },
    /// A `duration` fixed(12) into Interval(MonthDayNano).
    Duration {
        col: u32,
        path: u32,
    },
    /// An enum's index, stored as its symbol (table `symbols` of [`Plan::enums`]).
    Enum {
        col: u32,
        symbols: u32,
        path: u32,
    },
    SkipVarint {
        path: u32,
    },
    SkipBytes {
        path: u32,
    },
    SkipFixed {
        size: u32,
        path: u32,
    },
    /// The operations of list `fields`, then a row of struct column `col` (`NONE`: none). They
    /// run as the `len` [`Step`]s from `steps`, whose records nested without a union, array or
    /// map are inlined `nest` levels deep.
    Record {
        fields: u32,
        col: u32,
        steps: u32,
        len: u32,
        nest: u32,
        /// Whether a step writes a column that can hold nulls (so keeps their validity).
        nulls: bool,
        /// Whether a step is a skip step.
        skips: bool,
    },
    /// Blocks of items, each read by operation `item`, then a row of list column `col`.
    Array {
        col: u32,
        item: u32,
        item_bytes: u32,
        path: u32,
    },
    /// Blocks of entries (a string key into column `key`, operation `value`), each a row of the
    /// entries struct `entries`, then a row of map column `col`.
    Map {
        col: u32,
        entries: u32,
        key: u32,
        value: u32,
        path: u32,
    },
    /// The branch index, then operation `branches[index]` (list `branches`).
    Union {
        branches: u32,
        path: u32,
    },
    /// A union branch the column cannot hold: an error naming it (`Plan::refusals`).
    Refuse {
        branch: u32,
        path: u32,
    },
    /// A declared column the writer does not have: the reader's default (`Plan::consts`), or a
    /// null when `value` is `NONE`.
    Fill {
        col: u32,
        value: u32,
    },
}

/// One step of a record's straight-line program. The common leaf reads are steps of their own,
/// each knowing its column's type, so that the record's loop dispatches once per value and a
/// skipped field costs a skip, without a call or a second match; consecutive skipped varints,
/// or fixed sizes, are one step. Anything else runs as its operation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    /// A `long` into an Int64 (or same-unit time) column.
    Long {
        col: u32,
    },
    /// An `int` into an Int32 (or Date32, Time32) column.
    Int {
        col: u32,
    },
    Float {
        col: u32,
    },
    Double {
        col: u32,
    },
    /// `string` or `bytes` into a Utf8 column (validated).
    Str {
        col: u32,
    },
    /// `string` or `bytes` into a Binary column.
    Bin {
        col: u32,
    },
    Bool {
        col: u32,
    },
    /// A row of struct column `col`: the end of an inlined record's fields.
    StructRow {
        col: u32,
    },
    /// Pass over `n` varints in a row (skip run `run` of [`Plan::runs`], which names them).
    SkipVarints {
        n: u32,
        run: u32,
    },
    /// Pass over a length and that many bytes (skip run `run`).
    SkipBytes {
        run: u32,
    },
    /// Pass over `n` bytes, the fixed sizes of skip run `run` added up.
    SkipFixed {
        n: u32,
        run: u32,
    },
    /// Operation `op`, run `level` records below the record that holds the step.
    Op {
        op: u32,
        level: u32,
    },
}

/// How a skipped value is passed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    Varint,
    /// A length, then that many bytes.
    Bytes,
    Fixed(u32),
}

/// The skipped values one skip step passes over at once (consecutive varints are counted
/// together a word at a time, consecutive fixed sizes added up). Where that fails, they are
/// passed over again one by one (`skips`) to name the field and offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipRun {
    /// Into [`Plan::skips`] and [`Plan::skip_paths`].
    pub(crate) skips: (u32, u32),
}

/// A reader's default for a field the writer lacks, as a column value.
#[derive(Debug, Clone)]
pub(crate) enum Const {
    Bool(bool),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Bytes(Box<[u8]>),
    /// An empty list or map.
    Empty,
}

/// Everything decided once per writer schema and set of columns.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) ops: Vec<Op>,
    pub(crate) lists: Vec<Vec<u32>>,
    /// Every record's steps ([`Op::Record`]), and the field path of each (for errors).
    pub(crate) steps: Vec<Step>,
    pub(crate) step_paths: Vec<u32>,
    /// The skip runs of the skip steps ([`Step::SkipVarints`], ...), and each skip with its
    /// field path.
    pub(crate) runs: Vec<SkipRun>,
    pub(crate) skips: Vec<Skip>,
    pub(crate) skip_paths: Vec<u32>,
    /// Per enum table: the bytes of the symbol read for each of the writer's indexes (`None`:
    /// the reader's enum has no such symbol and no default).
    pub(crate) enums: Vec<Vec<Option<Box<[u8]>>>>,
    pub(crate) consts: Vec<Const>,
    pub(crate) paths: Vec<String>,
    /// The union branches refused ([`Op::Refuse`]), as their errors name them.
    pub(crate) refusals: Vec<String>,
    /// The root record's operation.
    pub(crate) root: u32,
    /// Empty column buffers, cloned for each decoder.
    pub(crate) templates: Vec<Column>,
    /// The variant of each template's values. Columns that fit a plan have these variants
    /// (`decode::State::fits`), and every record step writes a column of its own variant
    /// ([`Plan::check_steps`]): together they let the steps write without checking either.
    pub(crate) layout: Arc<[Discriminant<Values>]>,
    /// Top-level column ids in schema order.
    pub(crate) top: Vec<usize>,
    pub(crate) schema: SchemaRef,
    pub(crate) max_depth: u32,
    /// Columns the writer lacks (filled with nulls or defaults).
    pub(crate) missing: usize,
}

/// Where a column's values go: its id and, for nested types, its children's.
#[derive(Debug, Clone)]
enum Target {
    Leaf {
        col: u32,
        ty: DataType,
    },
    Struct {
        col: u32,
        children: Vec<(String, Target)>,
    },
    List {
        col: u32,
        item: Box<Target>,
    },
    Map {
        col: u32,
        entries: u32,
        key: u32,
        value: Box<Target>,
    },
}

impl Target {
    fn col(&self) -> u32 {
        match self {
            Target::Leaf { col, .. }
            | Target::Struct { col, .. }
            | Target::List { col, .. }
            | Target::Map { col, .. } => *col,
        }
    }
}

/// A column (or struct child) still looking for its field: the rest of its path.
struct Want {
    segments: Vec<String>,
    target: Target,
    /// The declared column's name, for errors.
    column: String,
    /// The reader's field of the first segment (when a reader's schema is known): its aliases
    /// match writer fields too, its default fills in for a writer without it.
    reader: Option<RecordField>,
}

/// What to do with a declared column the writer's schema lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// It is an error (the columns were declared against this very schema).
    Error,
    /// Nulls (another version of the schema: the field was added or removed).
    Null,
}

/// Compiles the decoding of `writer` onto `columns`; with `reader` (the schema the columns
/// were declared against, when it is another), the Avro specification's resolution of a writer
/// against a reader: fields also by the reader's aliases, the reader's defaults for fields the
/// writer lacks, writer enum symbols by the reader's symbols.
pub(crate) fn compile(
    writer: &AvroSchema,
    reader: Option<&AvroSchema>,
    columns: &[ColumnSpec],
    missing: Missing,
    capacity: usize,
    max_depth: usize,
) -> Result<Plan, PlanError> {
    let mut c = Compiler {
        w: writer,
        r: reader,
        plan: Plan {
            ops: Vec::new(),
            lists: Vec::new(),
            steps: Vec::new(),
            step_paths: Vec::new(),
            runs: Vec::new(),
            skips: Vec::new(),
            skip_paths: Vec::new(),
            enums: Vec::new(),
            consts: Vec::new(),
            paths: Vec::new(),
            refusals: Vec::new(),
            root: 0,
            templates: Vec::new(),
            layout: Arc::from(Vec::new()),
            top: Vec::new(),
            schema: Arc::new(Schema::empty()),
            max_depth: u32::try_from(max_depth).unwrap_or(u32::MAX),
            missing: 0,
        },
        skips: HashMap::new(),
        pending: HashSet::new(),
        sizes: HashMap::new(),
        empty: HashMap::new(),
        capacity,
        missing,
    };
    if max_depth == 0 || max_depth > MAX_DEPTH_LIMIT {
        return Err(PlanError::Options(format!(
            "'avro.max.depth' must be between 1 and {MAX_DEPTH_LIMIT}"
        )));
    }
    let Node::Record { .. } = writer.node(writer.root()) else {
        return Err(PlanError::Unsupported {
            column: columns.first().map_or_else(String::new, |c| c.name.clone()),
            what: format!(
                "an Avro schema whose top level is {} (weir reads a record's fields as columns)",
                writer.describe(writer.root())
            ),
        });
    };
    let mut fields = Vec::with_capacity(columns.len());
    let mut wants = Vec::with_capacity(columns.len());
    for (i, col) in columns.iter().enumerate() {
        if columns[..i].iter().any(|x| x.name == col.name) {
            return Err(PlanError::Conflict {
                column: col.name.clone(),
                reason: "the column is declared twice".into(),
            });
        }
        let (target, ty) = c.target(&col.data_type, &col.name)?;
        c.plan.top.push(target.col() as usize);
        fields.push(Field::new(&col.name, ty, true));
        let path = col.path.as_deref().unwrap_or(&col.name);
        wants.push(Want {
            segments: path.split('.').map(str::to_string).collect(),
            target,
            column: col.name.clone(),
            reader: None,
        });
    }
    c.plan.schema = Arc::new(Schema::new(fields));
    let reader_root = reader.map(AvroSchema::root);
    c.plan.root = c.record(writer.root(), wants, NONE, "", reader_root)?;
    c.mark_nulls();
    c.plan.layout = c
        .plan
        .templates
        .iter()
        .map(|t| discriminant(&t.values))
        .collect();
    c.plan.check_steps()?;
    Ok(c.plan)
}

impl Plan {
    /// Checks that each record step writes a column, and one of the variant it writes:
    /// `decode::run_steps` writes without checking, relying on this.
    fn check_steps(&self) -> Result<(), PlanError> {
        let bytes = discriminant(&Values::Bytes {
            offsets: Vec::new(),
            data: Vec::new(),
        });
        for (i, step) in self.steps.iter().enumerate() {
            let (col, want) = match *step {
                Step::Long { col } => (col, discriminant(&Values::I64(Vec::new()))),
                Step::Int { col } => (col, discriminant(&Values::I32(Vec::new()))),
                Step::Float { col } => (col, discriminant(&Values::F32(Vec::new()))),
                Step::Double { col } => (col, discriminant(&Values::F64(Vec::new()))),
                Step::Str { col } | Step::Bin { col } => (col, bytes),
                Step::Bool { col } => (col, discriminant(&Values::Bool(Bits::with_capacity(0)))),
                Step::StructRow { col } => (
                    col,
                    discriminant(&Values::Struct {
                        children: Vec::new(),
                        len: 0,
                    }),
                ),
                Step::SkipVarints { .. }
                | Step::SkipBytes { .. }
                | Step::SkipFixed { .. }
                | Step::Op { .. } => continue,
            };
            if self.layout.get(col as usize) != Some(&want) {
                let path = self
                    .step_paths
                    .get(i)
                    .and_then(|&p| self.paths.get(p as usize));
                return Err(PlanError::Unsupported {
                    column: path.cloned().unwrap_or_default(),
                    what: format!(
                        "a plan whose step {i} writes column {col} of another type (a bug in \
                         weir: please report it with the schema)"
                    ),
                });
            }
        }
        Ok(())
    }
}

struct Compiler<'a> {
    w: &'a AvroSchema,
    r: Option<&'a AvroSchema>,
    plan: Plan,
    /// The skip operation of each writer node compiled so far (a recursive type's skip refers
    /// to itself).
    skips: HashMap<NodeId, u32>,
    /// Operations whose place is taken but whose content is not written yet (a recursive
    /// type's skip): a record's steps run them as operations.
    pending: HashSet<u32>,
    /// The fewest bytes of each writer node, and whether it always takes none (memoised: a
    /// schema that uses a record twice in the next, and so on, would make them exponential).
    sizes: HashMap<NodeId, u32>,
    empty: HashMap<NodeId, bool>,
    capacity: usize,
    missing: Missing,
}

impl Compiler<'_> {
    fn op(&mut self, op: Op) -> u32 {
        self.plan.ops.push(op);
        (self.plan.ops.len() - 1) as u32
    }

    fn list(&mut self, l: Vec<u32>) -> u32 {
        self.plan.lists.push(l);
        (self.plan.lists.len() - 1) as u32
    }

    /// The text naming union branch `i` (writer node `b`) for a refusal's error.
    fn refusal(&mut self, i: usize, b: NodeId) -> u32 {
        self.plan
            .refusals
            .push(format!("{i} ({})", self.w.describe(b)));
        (self.plan.refusals.len() - 1) as u32
    }

    fn path(&mut self, p: &str) -> u32 {
        if let Some(i) = self.plan.paths.iter().position(|x| x == p) {
            return i as u32;
        }
        self.plan.paths.push(p.to_string());
        (self.plan.paths.len() - 1) as u32
    }

    fn column(&mut self, values: Values, ty: DataType) -> u32 {
        self.plan
            .templates
            .push(Column::new(values, ty, self.capacity));
        (self.plan.templates.len() - 1) as u32
    }

    /// The columns of declared type `ty` (children first) and the Arrow type they build.
    fn target(&mut self, ty: &DataType, column: &str) -> Result<(Target, DataType), PlanError> {
        let unsupported = |what: String| PlanError::Unsupported {
            column: column.to_string(),
            what,
        };
        Ok(match ty {
            DataType::Struct(children) => {
                let mut fields = Vec::with_capacity(children.len());
                let mut targets = Vec::with_capacity(children.len());
                let mut ids = Vec::with_capacity(children.len());
                for f in children.iter() {
                    let (t, ct) = self.target(f.data_type(), &format!("{column}.{}", f.name()))?;
                    ids.push(t.col() as usize);
                    targets.push((f.name().clone(), t));
                    fields.push(Field::new(f.name(), ct, true));
                }
                let out = DataType::Struct(Fields::from(fields));
                let col = self.column(
                    Values::Struct {
                        children: ids,
                        len: 0,
                    },
                    out.clone(),
                );
                (
                    Target::Struct {
                        col,
                        children: targets,
                    },
                    out,
                )
            }
            DataType::List(item) => {
                let (t, it) = self.target(item.data_type(), &format!("{column}[]"))?;
                let out = DataType::List(Arc::new(Field::new(item.name(), it, true)));
                let col = self.column(
                    Values::List {
                        offsets: Vec::new(),
                        child: t.col() as usize,
                    },
                    out.clone(),
                );
                (
                    Target::List {
                        col,
                        item: Box::new(t),
                    },
                    out,
                )
            }
            DataType::Map(entries, sorted) => {
                let DataType::Struct(kv) = entries.data_type() else {
                    return Err(unsupported(format!(
                        "a Map whose entries are {}",
                        entries.data_type()
                    )));
                };
                if *sorted || kv.len() != 2 || kv[0].data_type() != &DataType::Utf8 {
                    return Err(unsupported(
                        "a Map other than unsorted Map(Utf8, value) (Avro map keys are strings, \
                         in the writer's order)"
                            .into(),
                    ));
                }
                let key = self.column(Values::bytes(), DataType::Utf8);
                let (vt, vty) = self.target(kv[1].data_type(), &format!("{column}{{}}"))?;
                let entries_type = DataType::Struct(Fields::from(vec![
                    Field::new(kv[0].name(), DataType::Utf8, false),
                    Field::new(kv[1].name(), vty, true),
                ]));
                let entries_col = self.column(
                    Values::Struct {
                        children: vec![key as usize, vt.col() as usize],
                        len: 0,
                    },
                    entries_type.clone(),
                );
                let out = DataType::Map(
                    Arc::new(Field::new(entries.name(), entries_type, false)),
                    false,
                );
                let col = self.column(
                    Values::List {
                        offsets: Vec::new(),
                        child: entries_col as usize,
                    },
                    out.clone(),
                );
                (
                    Target::Map {
                        col,
                        entries: entries_col,
                        key,
                        value: Box::new(vt),
                    },
                    out,
                )
            }
            other => {
                let values = match other {
                    DataType::Boolean => Values::Bool(Default::default()),
                    DataType::Int32
                    | DataType::Date32
                    | DataType::Time32(TimeUnit::Millisecond) => Values::I32(Vec::new()),
                    DataType::Int64
                    | DataType::Timestamp(_, _)
                    | DataType::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond) => {
                        Values::I64(Vec::new())
                    }
                    DataType::Float32 => Values::F32(Vec::new()),
                    DataType::Float64 => Values::F64(Vec::new()),
                    DataType::Decimal128(_, _) | DataType::Interval(IntervalUnit::MonthDayNano) => {
                        Values::I128(Vec::new())
                    }
                    DataType::Decimal256(_, _) => Values::I256(Vec::new()),
                    DataType::Utf8 | DataType::Binary => Values::bytes(),
                    _ => {
                        return Err(unsupported(format!(
                            "Arrow type {other} (the Avro decoder reads Boolean, Int32, Int64, \
                             Float32, Float64, Decimal128, Decimal256, Date32, Time32(ms), Time64(us|ns), \
                             Timestamp, Interval(MonthDayNano), Utf8, Binary, Struct, List and \
                             Map)"
                        )))
                    }
                };
                let col = self.column(values, other.clone());
                (
                    Target::Leaf {
                        col,
                        ty: other.clone(),
                    },
                    other.clone(),
                )
            }
        })
    }

    /// The operation reading writer record `node`, feeding `wants` (by field name or path) and
    /// a row of struct column `col`.
    fn record(
        &mut self,
        node: NodeId,
        mut wants: Vec<Want>,
        col: u32,
        prefix: &str,
        reader: Option<NodeId>,
    ) -> Result<u32, PlanError> {
        let Node::Record { fields, .. } = self.w.node(node).clone() else {
            return Ok(self.skip(node, prefix));
        };
        if let (Some(r), Some(rec)) = (self.r, reader) {
            for w in &mut wants {
                w.reader = r.field(rec, &w.segments[0]).cloned();
            }
        }
        // Each want's writer field: the one of its name, else (by the reader's aliases) one of
        // another name, as the specification orders them.
        let bound: Vec<Option<usize>> = wants
            .iter()
            .map(|w| {
                fields
                    .iter()
                    .position(|f| f.name == w.segments[0])
                    .or_else(|| {
                        let aliases = &w.reader.as_ref()?.aliases;
                        fields.iter().position(|f| aliases.contains(&f.name))
                    })
            })
            .collect();
        let mut wants: Vec<(Option<usize>, Want)> = bound.into_iter().zip(wants).collect();
        let mut ops = Vec::with_capacity(fields.len() + 1);
        for (index, f) in fields.iter().enumerate() {
            let path = if prefix.is_empty() {
                f.name.clone()
            } else {
                format!("{prefix}.{}", f.name)
            };
            let (mine, rest): (Vec<_>, Vec<_>) =
                wants.into_iter().partition(|(b, _)| *b == Some(index));
            let mine: Vec<Want> = mine.into_iter().map(|(_, w)| w).collect();
            wants = rest;
            let op = match mine.as_slice() {
                [] => self.skip(f.schema, &path),
                [one] if one.segments.len() == 1 => {
                    let one = mine.into_iter().next().expect("one want");
                    let rnode = one.reader.as_ref().map(|r| r.schema);
                    self.value(f.schema, &one.target, &one.column, &path, rnode)?
                }
                all if all.iter().all(|w| w.segments.len() > 1) => {
                    // The reader's record below (all share the first segment, so its field).
                    let rnode = all[0]
                        .reader
                        .as_ref()
                        .zip(self.r)
                        .map(|(f, r)| r.non_null(f.schema));
                    let tails = mine
                        .into_iter()
                        .map(|mut w| {
                            w.segments.remove(0);
                            w
                        })
                        .collect();
                    self.through(f.schema, tails, &path, rnode)?
                }
                all => {
                    let names: Vec<&str> = all.iter().map(|w| w.column.as_str()).collect();
                    return Err(PlanError::Conflict {
                        column: names[0].to_string(),
                        reason: format!(
                            "columns {} all read field '{path}'; read it once, as a struct \
                             column, or through paths below it only",
                            names.join(", ")
                        ),
                    });
                }
            };
            ops.push(op);
        }
        for (_, w) in wants {
            if self.missing == Missing::Error {
                return Err(PlanError::UnknownField {
                    column: w.column,
                    message: self.w.describe(node),
                    field: w.segments.join("."),
                });
            }
            self.plan.missing += 1;
            let value = match w.reader.as_ref().and_then(|f| f.default.as_ref()) {
                Some(d) if w.segments.len() == 1 => self.default(d, &w, prefix)?,
                _ => NONE,
            };
            let op = self.op(Op::Fill {
                col: w.target.col(),
                value,
            });
            ops.push(op);
        }
        Ok(self.record_op(ops, col))
    }

    /// The record operation of field operations `ops`, with its steps.
    fn record_op(&mut self, ops: Vec<u32>, col: u32) -> u32 {
        let op = self.op(Op::Null { cols: 0 });
        self.set_record(op, ops, col);
        op
    }

    /// Writes record operation `at`: field operations `ops`, then a row of `col`.
    fn set_record(&mut self, at: u32, ops: Vec<u32>, col: u32) {
        let mut out = Steps::default();
        for &f in &ops {
            self.step(f, 1, &mut out);
        }
        out.end_skips(&mut self.plan);
        let steps = self.plan.steps.len() as u32;
        let len = out.steps.len() as u32;
        let skips = out.steps.iter().any(|(s, _)| s.is_skip());
        for (step, path) in out.steps {
            self.plan.steps.push(step);
            self.plan.step_paths.push(path);
        }
        let fields = self.list(ops);
        self.plan.ops[at as usize] = Op::Record {
            fields,
            col,
            steps,
            len,
            nest: out.nest,
            nulls: true,
            skips,
        };
    }

    /// Which columns can hold a null: those a null or a missing field's fill writes, and the
    /// fields of such structs. A record none of whose steps writes one runs without validity
    /// checks: its columns never get a validity bitmap.
    fn mark_nulls(&mut self) {
        let plan = &mut self.plan;
        let mut nullable = vec![false; plan.templates.len()];
        let mut next: Vec<u32> = Vec::new();
        for op in &plan.ops {
            match *op {
                Op::Null { cols } => next.extend(&plan.lists[cols as usize]),
                Op::Fill { col, value: NONE } => next.push(col),
                _ => {}
            }
        }
        while let Some(c) = next.pop() {
            let Some(n) = nullable.get_mut(c as usize) else {
                continue;
            };
            if std::mem::replace(n, true) {
                continue;
            }
            if let Values::Struct { children, .. } = &plan.templates[c as usize].values {
                next.extend(children.iter().map(|&ch| ch as u32));
            }
        }
        let writes_nullable = |step: &Step| match *step {
            Step::Long { col }
            | Step::Int { col }
            | Step::Float { col }
            | Step::Double { col }
            | Step::Str { col }
            | Step::Bin { col }
            | Step::Bool { col }
            | Step::StructRow { col } => nullable.get(col as usize).copied().unwrap_or(true),
            Step::SkipVarints { .. }
            | Step::SkipBytes { .. }
            | Step::SkipFixed { .. }
            | Step::Op { .. } => false,
        };
        for op in &mut plan.ops {
            if let Op::Record {
                steps, len, nulls, ..
            } = op
            {
                let (from, to) = (*steps as usize, (*steps + *len) as usize);
                *nulls = plan.steps[from..to].iter().any(writes_nullable);
            }
        }
    }

    /// Appends the steps of operation `op`, `level` records below the record being written.
    fn step(&mut self, op: u32, level: u32, out: &mut Steps) {
        let leaf = |out: &mut Steps, plan: &mut Plan, step: Step, path: u32| {
            out.end_skips(plan);
            out.steps.push((step, path));
        };
        if self.pending.contains(&op) {
            leaf(out, &mut self.plan, Step::Op { op, level }, NONE);
            return;
        }
        match self.plan.ops[op as usize] {
            Op::SkipVarint { path } => out.skips.push((Skip::Varint, path)),
            Op::SkipBytes { path } => out.skips.push((Skip::Bytes, path)),
            Op::SkipFixed { size, path } => out.skips.push((Skip::Fixed(size), path)),
            // Nothing on the wire and no column (an always-empty value skipped).
            Op::Null { cols } if self.plan.lists[cols as usize].is_empty() => {}
            Op::Long {
                col,
                to: Num::I64,
                path,
            } => leaf(out, &mut self.plan, Step::Long { col }, path),
            Op::Int {
                col,
                to: Num::I32,
                path,
            } => leaf(out, &mut self.plan, Step::Int { col }, path),
            Op::Float {
                col,
                to: Num::F32,
                path,
            } => leaf(out, &mut self.plan, Step::Float { col }, path),
            Op::Double { col, path } => leaf(out, &mut self.plan, Step::Double { col }, path),
            Op::Bytes { col, utf8, path } => {
                let step = if utf8 {
                    Step::Str { col }
                } else {
                    Step::Bin { col }
                };
                leaf(out, &mut self.plan, step, path);
            }
            Op::Bool { col, path } => leaf(out, &mut self.plan, Step::Bool { col }, path),
            // A record inside a record is the same bytes as its fields in line. Bounded, as a
            // record that holds itself without a union has no finite value.
            Op::Record { fields, col, .. } if level <= MAX_INLINE => {
                out.nest = out.nest.max(level);
                let fields = self.plan.lists[fields as usize].clone();
                for f in fields {
                    self.step(f, level + 1, out);
                }
                if col != NONE {
                    leaf(out, &mut self.plan, Step::StructRow { col }, NONE);
                }
            }
            _ => leaf(out, &mut self.plan, Step::Op { op, level }, NONE),
        }
    }

    /// A record (or `["null", record]`) on the path of deeper columns.
    fn through(
        &mut self,
        node: NodeId,
        wants: Vec<Want>,
        path: &str,
        reader: Option<NodeId>,
    ) -> Result<u32, PlanError> {
        match self.w.node(node).clone() {
            Node::Record { .. } => self.record(node, wants, NONE, path, reader),
            Node::Union(branches) => {
                let cols: Vec<u32> = wants.iter().map(|w| w.target.col()).collect();
                let mut wants = Some(wants);
                let mut ops = Vec::with_capacity(branches.len());
                for (i, &b) in branches.iter().enumerate() {
                    let op = match self.w.node(b) {
                        Node::Null => {
                            let cols = self.list(cols.clone());
                            self.op(Op::Null { cols })
                        }
                        Node::Record { .. } if wants.is_some() => {
                            let w = wants.take().expect("checked");
                            self.record(b, w, NONE, path, reader)?
                        }
                        _ => {
                            let p = self.path(path);
                            let branch = self.refusal(i, b);
                            self.op(Op::Refuse { branch, path: p })
                        }
                    };
                    ops.push(op);
                }
                if let Some(w) = wants {
                    return Err(self.not_a_record(node, &w, path));
                }
                let branches = self.list(ops);
                let p = self.path(path);
                Ok(self.op(Op::Union { branches, path: p }))
            }
            _ => Err(self.not_a_record(node, &wants, path)),
        }
    }

    fn not_a_record(&self, node: NodeId, wants: &[Want], path: &str) -> PlanError {
        let column = wants.first().map_or_else(String::new, |w| w.column.clone());
        PlanError::BadPath {
            column,
            path: format!(
                "{path}.{}",
                wants
                    .first()
                    .map_or_else(String::new, |w| w.segments.join("."))
            ),
            field: path.to_string(),
            reason: format!("it is {}, not a record", self.w.describe(node)),
        }
    }

    /// The operation reading writer `node` into `target`.
    fn value(
        &mut self,
        node: NodeId,
        target: &Target,
        column: &str,
        path: &str,
        reader: Option<NodeId>,
    ) -> Result<u32, PlanError> {
        // The reader's type of this value, `["null", T]` unwrapped.
        let rtype = reader.zip(self.r).map(|(n, r)| r.non_null(n));
        let p = self.path(path);
        let mismatch = |c: &Self, hint: &str| PlanError::AvroTypeMismatch {
            column: column.to_string(),
            field: path.to_string(),
            reason: format!(
                "is Avro {}, which cannot be read as Arrow {}{hint}",
                c.w.describe(node),
                match target {
                    Target::Leaf { ty, .. } => ty.to_string(),
                    Target::Struct { .. } => "Struct".into(),
                    Target::List { .. } => "List".into(),
                    Target::Map { .. } => "Map".into(),
                }
            ),
        };
        let node_def = self.w.node(node).clone();
        let op = match (&node_def, target) {
            (Node::Null, t) => {
                let cols = self.list(vec![t.col()]);
                Op::Null { cols }
            }
            (Node::Union(branches), t) => {
                let mut ops = Vec::with_capacity(branches.len());
                let mut any = false;
                let mut first_error = None;
                for (i, &b) in branches.iter().enumerate() {
                    match self.value(b, t, column, path, reader) {
                        Ok(op) => {
                            any |= !matches!(self.w.node(b), Node::Null);
                            ops.push(op);
                        }
                        // A branch of another type is refused per message; anything else
                        // (a default, a conflict inside it) is the plan's error.
                        Err(e @ PlanError::AvroTypeMismatch { .. }) => {
                            first_error.get_or_insert(e);
                            let branch = self.refusal(i, b);
                            ops.push(self.op(Op::Refuse { branch, path: p }));
                        }
                        Err(e) => return Err(e),
                    }
                }
                if !any {
                    // One branch's own mismatch says most (a struct child of another type).
                    let nullable = branches
                        .iter()
                        .filter(|&&b| !matches!(self.w.node(b), Node::Null))
                        .count()
                        == 1;
                    return Err(match first_error {
                        Some(e) if nullable => e,
                        _ => mismatch(self, "; no branch of the union can be read as the column"),
                    });
                }
                let branches = self.list(ops);
                Op::Union { branches, path: p }
            }
            (Node::Record { .. }, Target::Struct { col, children }) => {
                let wants = children
                    .iter()
                    .map(|(name, t)| Want {
                        segments: vec![name.clone()],
                        target: t.clone(),
                        column: format!("{column}.{name}"),
                        reader: None,
                    })
                    .collect();
                let saved = self.missing;
                // A struct's children are matched by name; one the record lacks reads as null.
                self.missing = Missing::Null;
                let op = self.record(node, wants, *col, path, rtype);
                self.missing = saved;
                return op;
            }
            (Node::Array(item), Target::List { col, item: it }) => {
                let item_bytes = self.min_bytes(*item);
                let ritem = rtype.zip(self.r).and_then(|(n, r)| match r.node(n) {
                    Node::Array(i) => Some(*i),
                    _ => None,
                });
                let item = self.value(
                    *item,
                    it,
                    &format!("{column}[]"),
                    &format!("{path}[]"),
                    ritem,
                )?;
                Op::Array {
                    col: *col,
                    item,
                    item_bytes,
                    path: p,
                }
            }
            (
                Node::Map(v),
                Target::Map {
                    col,
                    entries,
                    key,
                    value,
                },
            ) => {
                let rvalue = rtype.zip(self.r).and_then(|(n, r)| match r.node(n) {
                    Node::Map(v) => Some(*v),
                    _ => None,
                });
                let value = self.value(
                    *v,
                    value,
                    &format!("{column}{{}}"),
                    &format!("{path}{{}}"),
                    rvalue,
                )?;
                Op::Map {
                    col: *col,
                    entries: *entries,
                    key: *key,
                    value,
                    path: p,
                }
            }
            (n, Target::Leaf { col, ty }) => {
                let col = *col;
                match leaf(n, ty) {
                    Some(Leaf::Bool) => Op::Bool { col, path: p },
                    Some(Leaf::Int(to)) => Op::Int { col, to, path: p },
                    Some(Leaf::Long(to)) => Op::Long { col, to, path: p },
                    Some(Leaf::Float(to)) => Op::Float { col, to, path: p },
                    Some(Leaf::Double) => Op::Double { col, path: p },
                    Some(Leaf::Bytes { utf8 }) => Op::Bytes { col, utf8, path: p },
                    Some(Leaf::Fixed(size)) => Op::Fixed { col, size, path: p },
                    Some(Leaf::Decimal {
                        size,
                        precision,
                        wide,
                    }) => Op::Decimal {
                        wide,
                        col,
                        size,
                        precision,
                        path: p,
                    },
                    Some(Leaf::Duration) => Op::Duration { col, path: p },
                    Some(Leaf::Enum(symbols)) => {
                        // Against a reader's enum: each writer symbol by name, else the
                        // reader's default, else an error for the messages that hold it.
                        let reader_enum = rtype.zip(self.r).and_then(|(n, r)| match r.node(n) {
                            Node::Enum {
                                symbols, default, ..
                            } => Some((symbols.clone(), default.clone())),
                            _ => None,
                        });
                        let table = symbols
                            .iter()
                            .map(|s| match &reader_enum {
                                None => Some(s.as_bytes().into()),
                                Some((known, default)) => known
                                    .iter()
                                    .find(|k| *k == s)
                                    .or(default.as_ref())
                                    .map(|k| k.as_bytes().into()),
                            })
                            .collect();
                        self.plan.enums.push(table);
                        Op::Enum {
                            col,
                            symbols: (self.plan.enums.len() - 1) as u32,
                            path: p,
                        }
                    }
                    None => return Err(mismatch(self, hint(n, ty))),
                }
            }
            _ => return Err(mismatch(self, "")),
        };
        Ok(self.op(op))
    }

    /// The constant of the reader's default `d` for want `w`'s column (the Avro specification's
    /// JSON form of a default: numbers, strings, booleans, `[]` and `{}`).
    fn default(&mut self, d: &Value, w: &Want, prefix: &str) -> Result<u32, PlanError> {
        let ty = match &w.target {
            Target::Leaf { ty, .. } => ty.clone(),
            Target::List { .. } => {
                DataType::List(Arc::new(Field::new("item", DataType::Null, true)))
            }
            Target::Map { .. } => DataType::Null,
            Target::Struct { .. } => DataType::Struct(Fields::empty()),
        };
        // A number in the reader's logical type (a date, a time, a timestamp) reads as the
        // writer's value would: in the column's unit.
        let numeric = w
            .reader
            .as_ref()
            .zip(self.r)
            .and_then(|(f, r)| leaf(r.node(r.non_null(f.schema)), &ty));
        let c = match (d, &w.target, &ty, numeric) {
            (Value::Null, _, _, _) => return Ok(NONE),
            (Value::Number(n), _, _, Some(Leaf::Int(to) | Leaf::Long(to))) => {
                let v = n.as_i64().ok_or_else(|| self.bad_default(d, w, prefix))?;
                match to {
                    Num::I32 => {
                        Const::I32(i32::try_from(v).map_err(|_| self.bad_default(d, w, prefix))?)
                    }
                    Num::I64 => Const::I64(v),
                    Num::F32 => Const::F32(v as f32),
                    Num::F64 => Const::F64(v as f64),
                    Num::Mul(k) => Const::I64(
                        v.checked_mul(k)
                            .ok_or_else(|| self.bad_default(d, w, prefix))?,
                    ),
                }
            }
            (Value::Bool(b), _, DataType::Boolean, _) => Const::Bool(*b),
            (Value::Number(n), _, DataType::Int32, _) => n
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .map(Const::I32)
                .ok_or(())
                .map_err(|_| self.bad_default(d, w, prefix))?,
            (Value::Number(n), _, DataType::Int64, _) => {
                Const::I64(n.as_i64().ok_or_else(|| self.bad_default(d, w, prefix))?)
            }
            (Value::Number(n), _, DataType::Float32, _) => {
                Const::F32(n.as_f64().ok_or_else(|| self.bad_default(d, w, prefix))? as f32)
            }
            (Value::Number(n), _, DataType::Float64, _) => {
                Const::F64(n.as_f64().ok_or_else(|| self.bad_default(d, w, prefix))?)
            }
            (Value::String(t), _, DataType::Utf8, _) => Const::Bytes(t.as_bytes().into()),
            // Avro's JSON form of bytes: each code point 0-255 is one byte.
            (Value::String(t), _, DataType::Binary, _) => Const::Bytes(
                t.chars()
                    .map(|c| u8::try_from(u32::from(c)).ok())
                    .collect::<Option<Vec<u8>>>()
                    .ok_or_else(|| self.bad_default(d, w, prefix))?
                    .into(),
            ),
            (Value::Array(a), Target::List { .. }, _, _) if a.is_empty() => Const::Empty,
            (Value::Object(o), Target::Map { .. }, _, _) if o.is_empty() => Const::Empty,
            _ => return Err(self.bad_default(d, w, prefix)),
        };
        self.plan.consts.push(c);
        Ok((self.plan.consts.len() - 1) as u32)
    }

    fn bad_default(&self, d: &Value, w: &Want, prefix: &str) -> PlanError {
        let field = if prefix.is_empty() {
            w.segments.join(".")
        } else {
            format!("{prefix}.{}", w.segments.join("."))
        };
        PlanError::Unsupported {
            column: w.column.clone(),
            what: format!(
                "the reader's default {d} of field '{field}', which the writer lacks, as a value                  of this column (weir fills in null, boolean, number and string defaults, and                  empty arrays and maps)"
            ),
        }
    }

    /// The operation skipping a value of writer `node` (compiled once per node).
    fn skip(&mut self, node: NodeId, path: &str) -> u32 {
        if let Some(&op) = self.skips.get(&node) {
            return op;
        }
        let p = self.path(path);
        if self.always_empty(node) {
            let cols = self.list(Vec::new());
            let at = self.op(Op::Null { cols });
            self.skips.insert(node, at);
            return at;
        }
        let op = match self.w.node(node).clone() {
            Node::Null => {
                let cols = self.list(Vec::new());
                Op::Null { cols }
            }
            Node::Boolean => Op::SkipFixed { size: 1, path: p },
            Node::Int(_) | Node::Long(_) | Node::Enum { .. } => Op::SkipVarint { path: p },
            Node::Float => Op::SkipFixed { size: 4, path: p },
            Node::Double => Op::SkipFixed { size: 8, path: p },
            Node::Bytes(_) | Node::String(_) => Op::SkipBytes { path: p },
            Node::Fixed { size, .. } => Op::SkipFixed {
                size: u32::try_from(size).unwrap_or(u32::MAX),
                path: p,
            },
            Node::Record { fields, .. } => {
                // Registered before the fields, so a field of the record's own type finds it.
                let at = self.op(Op::Null { cols: 0 });
                self.skips.insert(node, at);
                self.pending.insert(at);
                let ops = fields
                    .iter()
                    .map(|f| self.skip(f.schema, &format!("{path}.{}", f.name)))
                    .collect();
                self.set_record(at, ops, NONE);
                self.pending.remove(&at);
                return at;
            }
            Node::Array(item) => {
                let at = self.op(Op::SkipVarint { path: p });
                self.skips.insert(node, at);
                self.pending.insert(at);
                let item_bytes = self.min_bytes(item);
                let item = self.skip(item, &format!("{path}[]"));
                self.plan.ops[at as usize] = Op::Array {
                    col: NONE,
                    item,
                    item_bytes,
                    path: p,
                };
                self.pending.remove(&at);
                return at;
            }
            Node::Map(v) => {
                let at = self.op(Op::SkipVarint { path: p });
                self.skips.insert(node, at);
                self.pending.insert(at);
                let value = self.skip(v, &format!("{path}{{}}"));
                self.plan.ops[at as usize] = Op::Map {
                    col: NONE,
                    entries: NONE,
                    key: NONE,
                    value,
                    path: p,
                };
                self.pending.remove(&at);
                return at;
            }
            Node::Union(branches) => {
                let at = self.op(Op::SkipVarint { path: p });
                self.skips.insert(node, at);
                self.pending.insert(at);
                let ops = branches.iter().map(|&b| self.skip(b, path)).collect();
                let branches = self.list(ops);
                self.plan.ops[at as usize] = Op::Union { branches, path: p };
                self.pending.remove(&at);
                return at;
            }
        };
        let at = self.op(op);
        self.skips.insert(node, at);
        at
    }

    /// The fewest bytes a value of `node` takes (0 for null and for records of nothing): the
    /// bound on a block's item count that a message's own length gives.
    fn min_bytes(&mut self, node: NodeId) -> u32 {
        if let Some(&n) = self.sizes.get(&node) {
            return n;
        }
        // In progress (a record that holds itself without a union has no finite value): any
        // answer will do.
        self.sizes.insert(node, 1);
        let n = match self.w.node(node).clone() {
            Node::Null => 0,
            Node::Float => 4,
            Node::Double => 8,
            Node::Fixed { size, .. } => u32::try_from(size).unwrap_or(u32::MAX),
            Node::Record { fields, .. } => fields
                .iter()
                .map(|f| self.min_bytes(f.schema))
                .fold(0u32, u32::saturating_add),
            _ => 1,
        };
        self.sizes.insert(node, n);
        n
    }

    /// True when every value of `node` takes no bytes (null, records of nothing but such
    /// fields): skipping it is nothing, however many times the schema nests it.
    fn always_empty(&mut self, node: NodeId) -> bool {
        match self.w.node(node) {
            Node::Null => true,
            Node::Record { .. } => self.min_bytes(node) == 0 && self.only_empty(node),
            _ => false,
        }
    }

    fn only_empty(&mut self, node: NodeId) -> bool {
        if let Some(&e) = self.empty.get(&node) {
            return e;
        }
        self.empty.insert(node, false);
        let e = match self.w.node(node).clone() {
            Node::Null => true,
            Node::Record { fields, .. } => fields.iter().all(|f| self.only_empty(f.schema)),
            _ => false,
        };
        self.empty.insert(node, e);
        e
    }
}

/// How many records deep a record's steps inline the records it holds.
const MAX_INLINE: u32 = 8;

/// A record's steps as they are gathered: the steps with their paths, the skips not yet
/// closed into a step, and how deep records were inlined.
#[derive(Default)]
struct Steps {
    steps: Vec<(Step, u32)>,
    skips: Vec<(Skip, u32)>,
    nest: u32,
}

impl Steps {
    /// Closes the skips gathered so far into skip steps: one for each run of varints, each
    /// run of fixed sizes and each length-prefixed value.
    fn end_skips(&mut self, plan: &mut Plan) {
        let mut pending: Option<(Skip, u32, u32)> = None;
        for (skip, path) in std::mem::take(&mut self.skips) {
            let at = plan.skips.len() as u32;
            plan.skips.push(skip);
            plan.skip_paths.push(path);
            pending = match (pending, skip) {
                (Some((Skip::Varint, n, first)), Skip::Varint) => {
                    Some((Skip::Varint, n + 1, first))
                }
                (Some((Skip::Fixed(_), a, first)), Skip::Fixed(b))
                    if a.checked_add(b).is_some() =>
                {
                    Some((Skip::Fixed(0), a + b, first))
                }
                (done, _) => {
                    if let Some(done) = done {
                        self.close_skip(plan, done, at);
                    }
                    let n = match skip {
                        Skip::Varint | Skip::Bytes => 1,
                        Skip::Fixed(n) => n,
                    };
                    Some((skip, n, at))
                }
            };
        }
        if let Some(done) = pending {
            self.close_skip(plan, done, plan.skips.len() as u32);
        }
    }

    /// One skip step over skips `first..end` of [`Plan::skips`], of kind `kind`: `n` varints,
    /// a length-prefixed value, or `n` bytes.
    fn close_skip(&mut self, plan: &mut Plan, (kind, n, first): (Skip, u32, u32), end: u32) {
        plan.runs.push(SkipRun {
            skips: (first, end),
        });
        let run = (plan.runs.len() - 1) as u32;
        let step = match kind {
            Skip::Varint => Step::SkipVarints { n, run },
            Skip::Bytes => Step::SkipBytes { run },
            Skip::Fixed(_) => Step::SkipFixed { n, run },
        };
        self.steps.push((step, NONE));
    }
}

impl Step {
    /// Whether the step passes over skipped values.
    fn is_skip(&self) -> bool {
        matches!(
            self,
            Step::SkipVarints { .. } | Step::SkipBytes { .. } | Step::SkipFixed { .. }
        )
    }
}

/// How a writer scalar reads into a leaf column: an [`Op`] without its column and path.
enum Leaf {
    Bool,
    Int(Num),
    Long(Num),
    Float(Num),
    Double,
    Bytes {
        utf8: bool,
    },
    Fixed(u32),
    Decimal {
        size: u32,
        precision: u8,
        wide: bool,
    },
    Duration,
    Enum(Vec<String>),
}

/// The read of writer scalar `n` into a column of type `ty` (the Avro specification's
/// promotions, and the logical types onto their Arrow types), or `None`.
fn leaf(n: &Node, ty: &DataType) -> Option<Leaf> {
    use DataType as D;
    Some(match (n, ty) {
        (Node::Boolean, D::Boolean) => Leaf::Bool,
        (Node::Int(None), D::Int32)
        | (Node::Int(Some(Logical::Date)), D::Date32)
        | (Node::Int(Some(Logical::TimeMillis)), D::Time32(TimeUnit::Millisecond)) => {
            Leaf::Int(Num::I32)
        }
        (Node::Int(None), D::Int64) => Leaf::Int(Num::I64),
        (Node::Int(None), D::Float32) => Leaf::Int(Num::F32),
        (Node::Int(None), D::Float64) => Leaf::Int(Num::F64),
        (Node::Int(Some(Logical::TimeMillis)), D::Time64(TimeUnit::Microsecond)) => {
            Leaf::Int(Num::Mul(1_000))
        }
        (Node::Int(Some(Logical::TimeMillis)), D::Time64(TimeUnit::Nanosecond)) => {
            Leaf::Int(Num::Mul(1_000_000))
        }
        (Node::Long(None), D::Int64)
        | (Node::Long(Some(Logical::TimeMicros)), D::Time64(TimeUnit::Microsecond)) => {
            Leaf::Long(Num::I64)
        }
        (Node::Long(Some(Logical::TimeMicros)), D::Time64(TimeUnit::Nanosecond)) => {
            Leaf::Long(Num::Mul(1_000))
        }
        (Node::Long(None), D::Float32) => Leaf::Long(Num::F32),
        (Node::Long(None), D::Float64) => Leaf::Long(Num::F64),
        (Node::Long(Some(l)), D::Timestamp(unit, _)) => {
            let (from, _) = timestamp(*l)?;
            Leaf::Long(match (from, unit) {
                (a, b) if a == *b => Num::I64,
                (TimeUnit::Millisecond, TimeUnit::Microsecond)
                | (TimeUnit::Microsecond, TimeUnit::Nanosecond) => Num::Mul(1_000),
                (TimeUnit::Millisecond, TimeUnit::Nanosecond) => Num::Mul(1_000_000),
                _ => return None,
            })
        }
        (Node::Float, D::Float32) => Leaf::Float(Num::F32),
        (Node::Float, D::Float64) => Leaf::Float(Num::F64),
        (Node::Double, D::Float64) => Leaf::Double,
        (Node::String(_) | Node::Bytes(None), D::Utf8) => Leaf::Bytes { utf8: true },
        (Node::String(_) | Node::Bytes(None), D::Binary) => Leaf::Bytes { utf8: false },
        (
            Node::Bytes(Some(Logical::Decimal { precision, scale })),
            D::Decimal128(p, s) | D::Decimal256(p, s),
        ) if p >= precision && s == scale => Leaf::Decimal {
            size: 0,
            precision: *p,
            wide: matches!(ty, D::Decimal256(..)),
        },
        (
            Node::Fixed {
                size,
                logical: Some(Logical::Decimal { precision, scale }),
                ..
            },
            D::Decimal128(p, s) | D::Decimal256(p, s),
        ) if p >= precision && s == scale => Leaf::Decimal {
            size: *size as u32,
            precision: *p,
            wide: matches!(ty, D::Decimal256(..)),
        },
        (
            Node::Fixed {
                logical: Some(Logical::Duration),
                ..
            },
            D::Interval(IntervalUnit::MonthDayNano),
        ) => Leaf::Duration,
        (Node::Fixed { size, .. }, D::Binary) => Leaf::Fixed(u32::try_from(*size).ok()?),
        (Node::Enum { symbols, .. }, D::Utf8) => Leaf::Enum(symbols.clone()),
        _ => return None,
    })
}

/// A hint for a declared type that does not fit.
fn hint(n: &Node, ty: &DataType) -> &'static str {
    match (n, ty) {
        (Node::Long(None), DataType::Timestamp(..)) => {
            "; a plain long is not a timestamp: declare BIGINT, or give the field a \
             timestamp-millis/-micros/-nanos logical type"
        }
        (Node::Long(Some(_)), DataType::Timestamp(..)) => {
            "; a timestamp reads into its own unit or a finer one"
        }
        (
            Node::Bytes(Some(_)) | Node::Fixed { .. },
            DataType::Decimal128(..) | DataType::Decimal256(..),
        ) => "; a decimal reads into the same scale and a precision at least the writer's",
        (Node::Long(_), DataType::Int32) => "; a long does not narrow to INT: declare BIGINT",
        (Node::Double, DataType::Float32) => "; a double does not narrow to REAL: declare DOUBLE",
        _ => "",
    }
}
