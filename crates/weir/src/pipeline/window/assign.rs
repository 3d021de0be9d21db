//! Window assignment: `window_start` and `window_end` for each row. `TUMBLE` gives a row one
//! window; `HOP` gives it every window of `size` that starts on a multiple of `slide` and holds
//! its time (the row is repeated once per window). `SESSION` windows depend on the rows around
//! a row, so the aggregation assigns them (`super::session`); here they are the row's own time.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{cast, take_record_batch};
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::error::ArrowError;

use super::WindowKind;

/// The start of the tumbling window of `size` (aligned on `offset`) that holds `t`.
#[inline]
pub(crate) fn tumble_start(t: i64, size: i64, offset: i64) -> i64 {
    t.saturating_sub(offset).div_euclid(size) * size + offset
}

/// Adds `window_start` and `window_end` (of `time_type`) to `batch`, whose event times are
/// `times` (an Int64 view, no nulls: late and timeless rows are gone), in `schema` (the batch's
/// columns, then the two window columns).
pub(crate) fn assign(
    kind: WindowKind,
    batch: &RecordBatch,
    times: &ArrayRef,
    time_type: &DataType,
    schema: &SchemaRef,
) -> Result<RecordBatch, ArrowError> {
    let t = times.as_primitive::<Int64Type>().values();
    let (rows, starts, ends): (RecordBatch, Vec<i64>, Vec<i64>) = match kind {
        WindowKind::Tumble { size, offset } => {
            let starts: Vec<i64> = t.iter().map(|&t| tumble_start(t, size, offset)).collect();
            let ends = starts.iter().map(|s| s.saturating_add(size)).collect();
            (batch.clone(), starts, ends)
        }
        WindowKind::Hop {
            slide,
            size,
            offset,
        } => {
            let mut indices = Vec::with_capacity(t.len() * (size / slide.max(1)).max(1) as usize);
            let mut starts = Vec::with_capacity(indices.capacity());
            for (i, &t) in t.iter().enumerate() {
                // The latest window start at or before t, then back while the window holds t.
                let mut s = tumble_start(t, slide, offset);
                let mut here = Vec::new();
                while s.saturating_add(size) > t {
                    here.push(s);
                    s = s.saturating_sub(slide);
                }
                // Earliest window first, as the windows close.
                for s in here.into_iter().rev() {
                    indices.push(i as u32);
                    starts.push(s);
                }
            }
            let ends = starts.iter().map(|s| s.saturating_add(size)).collect();
            let taken = take_record_batch(batch, &UInt32Array::from(indices))?;
            (taken, starts, ends)
        }
        WindowKind::Session { .. } => (batch.clone(), t.to_vec(), t.to_vec()),
    };
    let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
    columns.push(cast(
        &(Arc::new(Int64Array::from(starts)) as ArrayRef),
        time_type,
    )?);
    columns.push(cast(
        &(Arc::new(Int64Array::from(ends)) as ArrayRef),
        time_type,
    )?);
    RecordBatch::try_new(Arc::clone(schema), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::datatypes::{Field, Schema, TimeUnit};

    fn run(kind: WindowKind, t: &[i64]) -> Vec<(i32, i64, i64)> {
        let ty = DataType::Timestamp(TimeUnit::Millisecond, None);
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)])),
            vec![Arc::new(Int32Array::from_iter_values(0..t.len() as i32))],
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("window_start", ty.clone(), false),
            Field::new("window_end", ty.clone(), false),
        ]));
        let times: ArrayRef = Arc::new(Int64Array::from(t.to_vec()));
        let out = assign(kind, &batch, &times, &ty, &schema).unwrap();
        let ids = out.column(0).as_primitive::<arrow::datatypes::Int32Type>();
        let s = cast(out.column(1), &DataType::Int64).unwrap();
        let e = cast(out.column(2), &DataType::Int64).unwrap();
        let (s, e) = (s.as_primitive::<Int64Type>(), e.as_primitive::<Int64Type>());
        (0..out.num_rows())
            .map(|i| (ids.value(i), s.value(i), e.value(i)))
            .collect()
    }

    #[test]
    fn tumbling_windows_hold_their_start_and_not_their_end() {
        let got = run(
            WindowKind::Tumble {
                size: 10,
                offset: 0,
            },
            &[0, 9, 10, -1],
        );
        assert_eq!(got, [(0, 0, 10), (1, 0, 10), (2, 10, 20), (3, -10, 0)]);
        let got = run(
            WindowKind::Tumble {
                size: 10,
                offset: 3,
            },
            &[3, 2],
        );
        assert_eq!(got, [(0, 3, 13), (1, -7, 3)]);
    }

    #[test]
    fn hopping_windows_repeat_each_row_once_per_window() {
        let got = run(
            WindowKind::Hop {
                slide: 5,
                size: 15,
                offset: 0,
            },
            &[7],
        );
        assert_eq!(got, [(0, -5, 10), (0, 0, 15), (0, 5, 20)]);
        // A size that is not a multiple of the slide: only the windows that hold the time.
        let got = run(
            WindowKind::Hop {
                slide: 4,
                size: 6,
                offset: 0,
            },
            &[9],
        );
        assert_eq!(got, [(0, 4, 10), (0, 8, 14)]);
    }
}
