//! Value-level comparison of batches from different decoders, so a decoder that drops or
//! garbles data cannot win the race.
//!
//! Columns are matched by name: a column of the reference batch is looked up among the other
//! batch's top-level columns, then among the children of its struct columns (ptars keeps
//! `base` as a struct where the others flatten it). Arrays compare equal when their logical
//! values and nulls are equal; `Int64` and `Timestamp` arrays compare by their `i64`s, and
//! struct and list arrays recursively, so differences in field nullability or naming that
//! Arrow's type equality would reject do not count.

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use crate::Result;

/// The column `name` of `batch`: top-level, or else a child of a top-level struct column.
pub fn find_column(batch: &RecordBatch, name: &str) -> Option<ArrayRef> {
    if let Some(column) = batch.column_by_name(name) {
        return Some(column.clone());
    }
    batch.columns().iter().find_map(|column| {
        column
            .as_struct_opt()
            .and_then(|s| s.column_by_name(name).cloned())
    })
}

/// Checks that every column of each `reference` batch holds the same values as the column of
/// the same name in the matching `other` batch (same batch boundaries required).
pub fn same_batches(reference: &[RecordBatch], other: &[RecordBatch]) -> Result<()> {
    if reference.len() != other.len() {
        return Err(format!("{} batches vs {}", reference.len(), other.len()).into());
    }
    for (i, (r, o)) in reference.iter().zip(other).enumerate() {
        if r.num_rows() != o.num_rows() {
            return Err(format!("batch {i}: {} rows vs {}", r.num_rows(), o.num_rows()).into());
        }
        for (field, column) in r.schema().fields().iter().zip(r.columns()) {
            let found = find_column(o, field.name())
                .ok_or_else(|| format!("batch {i}: no column {}", field.name()))?;
            same_values(column.as_ref(), found.as_ref())
                .map_err(|e| format!("batch {i}, column {}: {e}", field.name()))?;
        }
    }
    Ok(())
}

fn is_i64_like(t: &DataType) -> bool {
    matches!(t, DataType::Int64 | DataType::Timestamp(_, _))
}

/// Compares logical values and nulls of two arrays.
pub fn same_values(a: &dyn Array, b: &dyn Array) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("length {} vs {}", a.len(), b.len()));
    }
    for i in 0..a.len() {
        if a.is_null(i) != b.is_null(i) {
            return Err(format!(
                "row {i}: null {} vs {}",
                a.is_null(i),
                b.is_null(i)
            ));
        }
    }
    match (a.data_type(), b.data_type()) {
        (x, y) if x == y && !x.is_nested() => {
            if a.to_data() == b.to_data() {
                Ok(())
            } else {
                Err(format!("{x} values differ"))
            }
        }
        (x, y) if is_i64_like(x) && is_i64_like(y) => {
            let (av, bv) = (a.to_data(), b.to_data());
            let (av, bv) = (av.buffer::<i64>(0), bv.buffer::<i64>(0));
            for i in 0..a.len() {
                if a.is_valid(i) && av[i] != bv[i] {
                    return Err(format!("row {i}: {} vs {}", av[i], bv[i]));
                }
            }
            Ok(())
        }
        (DataType::Struct(fa), DataType::Struct(fb)) => {
            let (sa, sb) = (a.as_struct(), b.as_struct());
            if fa.len() != fb.len() {
                return Err(format!("{} struct fields vs {}", fa.len(), fb.len()));
            }
            for (field, child) in fa.iter().zip(sa.columns()) {
                let other = sb
                    .column_by_name(field.name())
                    .ok_or_else(|| format!("no struct field {}", field.name()))?;
                same_values(child.as_ref(), other.as_ref())
                    .map_err(|e| format!("{}: {e}", field.name()))?;
            }
            Ok(())
        }
        (DataType::List(_), DataType::List(_)) => {
            let (la, lb) = (a.as_list::<i32>(), b.as_list::<i32>());
            for i in 0..a.len() {
                if a.is_valid(i) {
                    same_values(la.value(i).as_ref(), lb.value(i).as_ref())
                        .map_err(|e| format!("row {i}: {e}"))?;
                }
            }
            Ok(())
        }
        (x, y) => Err(format!("type {x} vs {y}")),
    }
}
