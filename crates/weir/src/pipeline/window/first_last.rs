//! `first_value(x ORDER BY t)` and `last_value(x ORDER BY t)` over one ordering column of
//! 64-bit integers (timestamps, `BIGINT`, dates in milliseconds) and a primitive value: the
//! OHLC bar of a windowed query.
//!
//! Written here because DataFusion's accumulator for these keeps each group's ordering value
//! as a `ScalarValue` and builds and compares one per row it keeps (BENCHMARKS.md: about a
//! third of a windowed bar query's CPU on one reader, and most of the merge thread's on
//! sixteen). This one keeps the ordering as an `i64` per group and compares integers, with
//! DataFusion's semantics exactly: the same state columns (value, ordering, is-set), so
//! snapshots written by either read back in the other; ties keep the row seen first; nulls in
//! the ordering sort as its `NULLS FIRST`/`LAST` says; `IGNORE NULLS` skips null values; a
//! `FILTER` keeps only rows where it is true. Anything else stays on DataFusion's accumulator
//! ([`typed`] answers `None`).

use std::cmp::Ordering;
use std::marker::PhantomData;
use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Int64Array,
    PrimitiveArray,
};
use arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow::compute::SortOptions;
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Field, Float32Type, Float64Type, Int16Type,
    Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

/// The typed accumulator for `agg` when it is `first_value` or `last_value` with one ordering
/// column of a 64-bit integer type and a primitive value; `None` for anything else.
/// `state_fields` are the aggregate's (value, ordering, is-set).
pub(crate) fn typed(
    agg: &AggregateFunctionExpr,
    state_fields: &[Arc<Field>],
) -> Option<Box<dyn GroupsAccumulator>> {
    let pick = match agg.fun().name() {
        "first_value" => Pick::First,
        "last_value" => Pick::Last,
        _ => return None,
    };
    let [order] = agg.order_bys() else {
        return None;
    };
    let [value, ordering, is_set] = state_fields else {
        return None;
    };
    if agg.is_distinct()
        || !is_i64(ordering.data_type())
        || is_set.data_type() != &DataType::Boolean
    {
        return None;
    }
    let shape = Shape {
        pick,
        order: order.options,
        ignore_nulls: agg.ignore_nulls(),
        value_type: value.data_type().clone(),
        ordering_type: ordering.data_type().clone(),
    };
    macro_rules! with {
        ($t:ty) => {
            Some(Box::new(FirstLast::<$t>::new(shape)) as Box<dyn GroupsAccumulator>)
        };
    }
    match value.data_type() {
        DataType::Int8 => with!(Int8Type),
        DataType::Int16 => with!(Int16Type),
        DataType::Int32 => with!(Int32Type),
        DataType::Int64 => with!(Int64Type),
        DataType::UInt8 => with!(UInt8Type),
        DataType::UInt16 => with!(UInt16Type),
        DataType::UInt32 => with!(UInt32Type),
        DataType::UInt64 => with!(UInt64Type),
        DataType::Float32 => with!(Float32Type),
        DataType::Float64 => with!(Float64Type),
        DataType::Decimal128(_, _) => with!(Decimal128Type),
        DataType::Date32 => with!(Date32Type),
        DataType::Date64 => with!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => with!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => with!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => with!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => with!(TimestampNanosecondType),
        _ => None,
    }
}

/// Whether values of `t` are `i64`s in Arrow's memory.
fn is_i64(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int64
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Duration(_)
            | DataType::Time64(_)
    )
}

/// An ordering column's values and nulls, whatever its 64-bit logical type.
fn orderings(a: &dyn Array) -> Result<(&ScalarBuffer<i64>, Option<&NullBuffer>)> {
    use arrow::datatypes::{
        DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType,
        DurationSecondType, Time64MicrosecondType, Time64NanosecondType,
    };
    macro_rules! values {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            (p.values(), p.nulls())
        }};
    }
    Ok(match a.data_type() {
        DataType::Int64 => values!(Int64Type),
        DataType::Date64 => values!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => values!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => values!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => values!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => values!(TimestampNanosecondType),
        DataType::Duration(TimeUnit::Second) => values!(DurationSecondType),
        DataType::Duration(TimeUnit::Millisecond) => values!(DurationMillisecondType),
        DataType::Duration(TimeUnit::Microsecond) => values!(DurationMicrosecondType),
        DataType::Duration(TimeUnit::Nanosecond) => values!(DurationNanosecondType),
        DataType::Time64(TimeUnit::Microsecond) => values!(Time64MicrosecondType),
        DataType::Time64(TimeUnit::Nanosecond) => values!(Time64NanosecondType),
        other => {
            return Err(DataFusionError::Internal(format!(
                "first_value/last_value: an ordering column of type {other} is not 64-bit"
            )))
        }
    })
}

/// Which end of the ordering the aggregate keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    First,
    Last,
}

/// What an accumulator computes.
#[derive(Debug, Clone)]
struct Shape {
    pick: Pick,
    order: SortOptions,
    ignore_nulls: bool,
    value_type: DataType,
    ordering_type: DataType,
}

/// Per group: the value kept, its ordering value, and three flags.
#[derive(Debug)]
struct FirstLast<T: ArrowPrimitiveType + Send> {
    shape: Shape,
    values: Vec<T::Native>,
    orderings: Vec<i64>,
    /// `SET`, `VALUE_VALID` and `ORDERING_VALID` bits.
    flags: Vec<u8>,
    _type: PhantomData<T>,
}

const SET: u8 = 1;
const VALUE_VALID: u8 = 2;
const ORDERING_VALID: u8 = 4;

impl<T: ArrowPrimitiveType + Send> FirstLast<T> {
    fn new(shape: Shape) -> Self {
        Self {
            shape,
            values: Vec::new(),
            orderings: Vec::new(),
            flags: Vec::new(),
            _type: PhantomData,
        }
    }

    fn resize(&mut self, groups: usize) {
        if self.flags.len() < groups {
            self.values.resize(groups, T::Native::default());
            self.orderings.resize(groups, 0);
            self.flags.resize(groups, 0);
        }
    }

    /// Keeps each row of `values` (ordered by `ordering`) that beats its group's, where
    /// `keep(i)` says the row counts at all.
    fn fold(
        &mut self,
        values: &ArrayRef,
        ordering: &ArrayRef,
        groups: &[usize],
        keep: impl Fn(usize) -> bool,
    ) -> Result<()> {
        let values = values
            .as_primitive_opt::<T>()
            .ok_or_else(|| mismatch("value", values.data_type(), &self.shape.value_type))?;
        let (value_nulls, vals) = (values.nulls(), values.values());
        let (ords, ord_nulls) = orderings(ordering.as_ref())?;
        if vals.len() != groups.len() || ords.len() != groups.len() {
            return Err(DataFusionError::Internal(
                "first_value/last_value: columns and group indices differ in length".into(),
            ));
        }
        let (order, pick, ignore_nulls) =
            (self.shape.order, self.shape.pick, self.shape.ignore_nulls);
        for (i, &g) in groups.iter().enumerate() {
            if !keep(i) {
                continue;
            }
            let value_valid = value_nulls.is_none_or(|n| n.is_valid(i));
            if ignore_nulls && !value_valid {
                continue;
            }
            let ord_valid = ord_nulls.is_none_or(|n| n.is_valid(i));
            let (Some(flag), Some(kept)) = (self.flags.get(g).copied(), self.orderings.get(g))
            else {
                return Err(DataFusionError::Internal(format!(
                    "first_value/last_value: group {g} beyond the groups given"
                )));
            };
            let better = flag & SET == 0 || {
                let c = compare(
                    (ord_valid, ords[i]),
                    (flag & ORDERING_VALID != 0, *kept),
                    order,
                );
                match pick {
                    Pick::First => c == Ordering::Less,
                    Pick::Last => c == Ordering::Greater,
                }
            };
            if better {
                self.values[g] = vals[i];
                self.orderings[g] = ords[i];
                self.flags[g] = SET
                    | if value_valid { VALUE_VALID } else { 0 }
                    | if ord_valid { ORDERING_VALID } else { 0 };
            }
        }
        Ok(())
    }

    /// Takes the groups `emit_to` names: values, orderings, flags.
    fn take(&mut self, emit_to: EmitTo) -> (Vec<T::Native>, Vec<i64>, Vec<u8>) {
        (
            emit_to.take_needed(&mut self.values),
            emit_to.take_needed(&mut self.orderings),
            emit_to.take_needed(&mut self.flags),
        )
    }

    fn value_array(&self, values: Vec<T::Native>, flags: &[u8]) -> ArrayRef {
        let valid = NullBuffer::new(BooleanBuffer::from_iter(
            flags
                .iter()
                .map(|f| f & (SET | VALUE_VALID) == SET | VALUE_VALID),
        ));
        Arc::new(
            PrimitiveArray::<T>::new(values.into(), Some(valid))
                .with_data_type(self.shape.value_type.clone()),
        )
    }
}

/// `a` against `b`, each (valid, value), in the order `options` gives (nulls placed by
/// `nulls_first` whatever the direction, as Arrow's sort does).
fn compare(a: (bool, i64), b: (bool, i64), options: SortOptions) -> Ordering {
    match (a.0, b.0) {
        (false, false) => Ordering::Equal,
        (false, true) if options.nulls_first => Ordering::Less,
        (false, true) => Ordering::Greater,
        (true, false) if options.nulls_first => Ordering::Greater,
        (true, false) => Ordering::Less,
        (true, true) if options.descending => b.1.cmp(&a.1),
        (true, true) => a.1.cmp(&b.1),
    }
}

fn mismatch(what: &str, got: &DataType, want: &DataType) -> DataFusionError {
    DataFusionError::Internal(format!(
        "first_value/last_value: a {what} column of type {got}, where {want} was planned"
    ))
}

impl<T: ArrowPrimitiveType + Send> GroupsAccumulator for FirstLast<T> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let [value, ordering] = values else {
            return Err(DataFusionError::Internal(format!(
                "first_value/last_value: {} input columns, not a value and its ordering",
                values.len()
            )));
        };
        self.resize(total_num_groups);
        match opt_filter {
            None => self.fold(value, ordering, group_indices, |_| true),
            Some(f) => self.fold(value, ordering, group_indices, |i| {
                f.is_valid(i) && f.value(i)
            }),
        }
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let [value, ordering, is_set] = values else {
            return Err(DataFusionError::Internal(format!(
                "first_value/last_value: {} state columns, not 3",
                values.len()
            )));
        };
        let is_set = is_set
            .as_boolean_opt()
            .ok_or_else(|| mismatch("is-set", is_set.data_type(), &DataType::Boolean))?;
        self.resize(total_num_groups);
        self.fold(value, ordering, group_indices, |i| {
            is_set.is_valid(i) && is_set.value(i)
        })
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (values, _, flags) = self.take(emit_to);
        Ok(self.value_array(values, &flags))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (values, orderings, flags) = self.take(emit_to);
        let ordering_valid = NullBuffer::new(BooleanBuffer::from_iter(
            flags
                .iter()
                .map(|f| f & (SET | ORDERING_VALID) == SET | ORDERING_VALID),
        ));
        // The ordering's own logical type over the same i64s (`with_data_type` would refuse
        // a timestamp on an `Int64Array`).
        let ordering = Int64Array::new(orderings.into(), Some(ordering_valid))
            .into_data()
            .into_builder()
            .data_type(self.shape.ordering_type.clone())
            .build()?;
        let set = BooleanArray::new(
            BooleanBuffer::from_iter(flags.iter().map(|f| f & SET != 0)),
            None,
        );
        Ok(vec![
            self.value_array(values, &flags),
            make_array(ordering),
            Arc::new(set),
        ])
    }

    /// Raw rows as states, one a row, as DataFusion's does it (a row is set where the filter
    /// passes it).
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let [value, ordering] = values else {
            return Err(DataFusionError::Internal(format!(
                "first_value/last_value: {} input columns, not a value and its ordering",
                values.len()
            )));
        };
        let set = match opt_filter {
            Some(f) => f.clone(),
            None => BooleanArray::from(vec![true; value.len()]),
        };
        Ok(vec![Arc::clone(value), Arc::clone(ordering), Arc::new(set)])
    }

    fn size(&self) -> usize {
        self.values.capacity() * size_of::<T::Native>()
            + self.orderings.capacity() * 8
            + self.flags.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, TimestampNanosecondArray};
    use arrow::datatypes::Schema;
    use datafusion::functions_aggregate::first_last::{first_value_udaf, last_value_udaf};
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalSortExpr;

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    struct Input {
        value: ArrayRef,
        ts: ArrayRef,
        filter: BooleanArray,
        groups: Vec<usize>,
    }

    /// Rows of 37 groups, with null values, null and tied orderings, and a filter with nulls.
    fn input(rows: usize, seed: u64) -> Input {
        let mut r = Rng(seed);
        let value: Float64Array = (0..rows)
            .map(|_| (r.below(10) > 0).then(|| r.below(1000) as f64))
            .collect();
        let ts: TimestampNanosecondArray = (0..rows)
            .map(|_| (r.below(10) > 0).then(|| r.below(50) as i64 - 25))
            .collect();
        let filter: BooleanArray = (0..rows)
            .map(|_| (r.below(20) > 0).then(|| r.below(5) > 0))
            .collect();
        let groups = (0..rows).map(|_| r.below(37) as usize).collect();
        Input {
            value: Arc::new(value),
            ts: Arc::new(ts.with_timezone("UTC")),
            filter,
            groups,
        }
    }

    fn aggregate(first: bool, options: SortOptions, ignore_nulls: bool) -> AggregateFunctionExpr {
        let schema = Schema::new(vec![
            Field::new("v", DataType::Float64, true),
            Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                true,
            ),
        ]);
        let v = col("v", &schema).unwrap();
        let t = col("t", &schema).unwrap();
        let udaf = if first {
            first_value_udaf()
        } else {
            last_value_udaf()
        };
        AggregateExprBuilder::new(udaf, vec![v])
            .order_by(vec![PhysicalSortExpr::new(t, options)])
            .with_ignore_nulls(ignore_nulls)
            .schema(Arc::new(schema))
            .alias("f")
            .build()
            .unwrap()
    }

    /// Three partial accumulators over thirds of the rows, their states merged by a fourth.
    fn run(
        make: &dyn Fn() -> Box<dyn GroupsAccumulator>,
        input: &Input,
        filtered: bool,
    ) -> (Vec<Vec<ArrayRef>>, ArrayRef) {
        let n = input.groups.len();
        let mut states = Vec::new();
        let mut all_groups = Vec::new();
        for part in [0..n / 3, n / 3..n / 2, n / 2..n] {
            let len = part.len();
            let cols = [
                input.value.slice(part.start, len),
                input.ts.slice(part.start, len),
            ];
            let filter = input.filter.slice(part.start, len);
            let mut acc = make();
            acc.update_batch(
                &cols,
                &input.groups[part.clone()],
                filtered.then_some(&filter),
                37,
            )
            .unwrap();
            states.push(acc.state(EmitTo::All).unwrap());
            all_groups.push((0..37).collect::<Vec<usize>>());
        }
        let mut merge = make();
        for (s, g) in states.iter().zip(&all_groups) {
            merge.merge_batch(s, g, 37).unwrap();
        }
        (states, merge.evaluate(EmitTo::All).unwrap())
    }

    #[test]
    fn first_and_last_give_what_datafusion_gives_with_nulls_ties_filters_and_every_order() {
        let input = input(3000, 0x9e37_79b9_7f4a_7c15);
        for first in [true, false] {
            for descending in [false, true] {
                for nulls_first in [false, true] {
                    for ignore_nulls in [false, true] {
                        for filtered in [false, true] {
                            let options = SortOptions {
                                descending,
                                nulls_first,
                            };
                            let agg = aggregate(first, options, ignore_nulls);
                            let fields = agg.state_fields().unwrap();
                            let ours = || typed(&agg, &fields).expect("a typed accumulator");
                            let theirs = || agg.create_groups_accumulator().unwrap();
                            let case = format!(
                                "first {first}, {options:?}, ignore nulls {ignore_nulls}, \
                                 filtered {filtered}"
                            );
                            let (our_states, our_out) = run(&ours, &input, filtered);
                            let (their_states, their_out) = run(&theirs, &input, filtered);
                            assert_eq!(our_out.as_ref(), their_out.as_ref(), "{case}");
                            assert_eq!(our_states, their_states, "{case}: states");
                            for (s, f) in our_states[0].iter().zip(&fields) {
                                assert_eq!(s.data_type(), f.data_type(), "{case}");
                            }
                            // States written by one merge in the other (snapshots of either).
                            let mut merge = ours();
                            for s in &their_states {
                                merge
                                    .merge_batch(s, &(0..37).collect::<Vec<_>>(), 37)
                                    .unwrap();
                            }
                            let out = merge.evaluate(EmitTo::All).unwrap();
                            assert_eq!(out.as_ref(), their_out.as_ref(), "{case}: mixed");
                            // Some groups differ from a plain min or max of the values, so the
                            // ordering is what picked them.
                            assert!(our_out.null_count() < 37, "{case}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn emitting_the_first_groups_keeps_the_rest() {
        let input = input(500, 7);
        let agg = aggregate(true, SortOptions::default(), false);
        let fields = agg.state_fields().unwrap();
        let mut ours = typed(&agg, &fields).unwrap();
        let mut theirs = agg.create_groups_accumulator().unwrap();
        for acc in [&mut ours, &mut theirs] {
            acc.update_batch(
                &[Arc::clone(&input.value), Arc::clone(&input.ts)],
                &input.groups,
                None,
                37,
            )
            .unwrap();
        }
        assert_eq!(
            ours.state(EmitTo::First(5)).unwrap(),
            theirs.state(EmitTo::First(5)).unwrap()
        );
        assert_eq!(
            ours.evaluate(EmitTo::All).unwrap().as_ref(),
            theirs.evaluate(EmitTo::All).unwrap().as_ref()
        );
    }

    #[test]
    fn other_shapes_stay_on_datafusion() {
        let schema = Schema::new(vec![
            Field::new("v", DataType::Utf8, true),
            Field::new("t", DataType::Int32, true),
        ]);
        let v = col("v", &schema).unwrap();
        let t = col("t", &schema).unwrap();
        let agg = AggregateExprBuilder::new(first_value_udaf(), vec![v])
            .order_by(vec![PhysicalSortExpr::new(t, SortOptions::default())])
            .schema(Arc::new(schema))
            .alias("f")
            .build()
            .unwrap();
        assert!(typed(&agg, &agg.state_fields().unwrap()).is_none());
    }
}
