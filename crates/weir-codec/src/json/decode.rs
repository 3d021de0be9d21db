//! The per-message loop: scan a key, find it with the scope's precomputed matcher, then either
//! skip the value (validating it) or convert it straight into its column. No allocation (the
//! column buffers grow per batch), no String hashing, and `Kind`/`Values` are plain enums matched
//! per value, not trait objects.

use super::convert::{
    date_days, decimal128, epoch_number, exact_decimal, exact_int, rfc3339, secs_to_unit, to_f32,
    to_f64, DecimalError,
};
use super::plan::{Entry, Kind, Plan, ROOT};
use super::scan::{kind_name, syntax, unescape, Scanner};
use super::shape::{KeyOrder, UNREQUESTED};
use super::JsonMismatch;
use crate::columns::{push_null, push_offset, truncate, Column, Values};
use crate::error::{DecodeError, DecodeErrorKind};

/// Everything a decoder mutates.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) cols: Vec<Column>,
    /// Per scope, one bit per entry: the keys seen in the object being read.
    seen: Vec<u64>,
    /// Unescaped keys and strings that are parsed rather than stored (dates, decimals).
    scratch: Vec<u8>,
    /// The keys of the last object of each scope, in order (see [`KeyOrder`]).
    keys: KeyOrder,
    pub(crate) rows: usize,
}

/// Appends one value to a fixed-width column and marks it valid.
macro_rules! push {
    ($self:ident, $c:expr, $variant:ident, $v:expr) => {{
        let col = &mut $self.cols[$c];
        if let Values::$variant(x) = &mut col.values {
            x.push($v);
        }
        col.valid();
    }};
}

impl State {
    pub(crate) fn new(plan: &Plan) -> Self {
        Self {
            cols: plan.templates.iter().map(Column::clone_empty).collect(),
            seen: vec![0; plan.seen_words],
            scratch: Vec::with_capacity(256),
            keys: KeyOrder::new(plan.nodes.len()),
            rows: 0,
        }
    }

    /// Decodes one message as one row, or rolls the row back.
    pub(crate) fn decode_row(&mut self, plan: &Plan, buf: &[u8]) -> Result<(), DecodeError> {
        let mut sc = Scanner::new(buf, plan.max_depth);
        match self.row(plan, &mut sc) {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                for &c in &plan.top {
                    truncate(&mut self.cols, c, self.rows);
                }
                Err(e)
            }
        }
    }

    fn row(&mut self, plan: &Plan, sc: &mut Scanner<'_>) -> Result<(), DecodeError> {
        match sc.peek_ws() {
            Some(b'{') => {}
            None => return Err(syntax(sc.pos, "empty message (expected a JSON object)")),
            b => {
                let found = kind_name(b);
                if found == "invalid value" {
                    return Err(syntax(sc.pos, "expected '{' (a JSON object)"));
                }
                return Err(DecodeError::new(
                    sc.pos,
                    DecodeErrorKind::JsonNotAnObject { found },
                ));
            }
        }
        self.object(plan, sc, ROOT, 1)?;
        sc.ws();
        if sc.pos != sc.buf.len() {
            return Err(syntax(
                sc.pos,
                "trailing characters after the top-level object",
            ));
        }
        Ok(())
    }

    /// Reads the object whose `{` is at `pos` into scope `node`; `depth` counts the object.
    fn object(
        &mut self,
        plan: &Plan,
        sc: &mut Scanner<'_>,
        node_id: usize,
        depth: usize,
    ) -> Result<(), DecodeError> {
        sc.check_depth(depth)?;
        sc.pos += 1;
        let node = &plan.nodes[node_id];
        let at = node.seen_at;
        let words = node.words();
        if let Some(s) = self.seen.get_mut(at..at + words) {
            s.fill(0);
        }
        if sc.peek_ws() == Some(b'}') {
            sc.pos += 1;
        } else {
            // The key's position in this object, for the key-order prediction.
            let mut ordinal = 0;
            loop {
                let start;
                (sc.pos, ordinal, start) = self.keys.pair(node_id, ordinal, sc.buf, sc.pos);
                // Kept as two nested matches: one `hit` then one match on it measured 0.4-0.9%
                // more instructions a message (callgrind).
                let found = match start {
                    Some((len, entry)) => {
                        sc.pos += len;
                        entry
                    }
                    None => {
                        // Whitespace may come before the key.
                        if sc.peek_ws() != Some(b'"') {
                            return Err(sc.key_expected());
                        }
                        match self.keys.predict(node_id, ordinal, sc.buf, sc.pos) {
                            Some((len, entry)) => {
                                sc.pos += len;
                                entry
                            }
                            None => self.look_up_key(plan, sc, node_id, ordinal)?,
                        }
                    }
                };
                ordinal += 1;
                match found {
                    UNREQUESTED => sc.skip_value_fast(depth)?,
                    e => {
                        let e = e as usize;
                        let w = at + (e >> 6);
                        let bit = 1u64 << (e & 63);
                        let entry = node.entries[e];
                        if self.seen[w] & bit != 0 {
                            // A duplicate key: the last one wins, so drop the earlier value.
                            self.undo(plan, entry);
                        }
                        self.seen[w] |= bit;
                        match entry {
                            Entry::Column(c) => self.value(plan, sc, c, depth)?,
                            Entry::Path(n) => self.path(plan, sc, n, depth)?,
                        }
                    }
                }
                match sc.peek_ws() {
                    Some(b',') => sc.pos += 1,
                    Some(b'}') => {
                        sc.pos += 1;
                        break;
                    }
                    _ => return Err(sc.unexpected("expected ',' or '}' after an object value")),
                }
            }
        }
        self.fill_missing(plan, node_id);
        Ok(())
    }

    /// Scans the key at `pos` and its `:`, finds it with the scope's matcher, and records it as
    /// the prediction for `ordinal`: the path of a key that differs from the last object's.
    #[inline(never)]
    fn look_up_key(
        &mut self,
        plan: &Plan,
        sc: &mut Scanner<'_>,
        node_id: usize,
        ordinal: usize,
    ) -> Result<u32, DecodeError> {
        let text_start = sc.pos;
        let key = sc.string()?;
        sc.expect(b':', "expected ':' after an object key")?;
        let matcher = &plan.nodes[node_id].matcher;
        let found = if key.escaped {
            self.scratch.clear();
            unescape(&sc.buf[key.start..key.end], &mut self.scratch);
            matcher.find(&self.scratch)
        } else {
            matcher.find(&sc.buf[key.start..key.end])
        };
        let entry = found.map_or(UNREQUESTED, |e| e as u32);
        self.keys
            .record(node_id, ordinal, &sc.buf[text_start..sc.pos], entry);
        Ok(entry)
    }

    /// Null for every entry of the scope whose key did not appear.
    #[inline(always)]
    fn fill_missing(&mut self, plan: &Plan, node_id: usize) {
        let node = &plan.nodes[node_id];
        let n = node.entries.len();
        for w in 0..node.words() {
            let all = if (w + 1) * 64 <= n {
                u64::MAX
            } else {
                (1u64 << (n % 64)) - 1
            };
            let mut missing = !self.seen[node.seen_at + w] & all;
            while missing != 0 {
                let e = w * 64 + missing.trailing_zeros() as usize;
                missing &= missing - 1;
                match node.entries[e] {
                    Entry::Column(c) => push_null(&mut self.cols, c),
                    Entry::Path(p) => self.null_all(plan, p),
                }
            }
        }
    }

    fn null_all(&mut self, plan: &Plan, node_id: usize) {
        for &c in &plan.nodes[node_id].leaf_cols {
            push_null(&mut self.cols, c);
        }
    }

    /// Removes the value an entry got from an earlier occurrence of its key.
    #[cold]
    fn undo(&mut self, plan: &Plan, entry: Entry) {
        let cols: &[usize] = match &entry {
            Entry::Column(c) => std::slice::from_ref(c),
            Entry::Path(n) => &plan.nodes[*n].leaf_cols,
        };
        for &c in cols {
            let len = self.cols[c].len();
            truncate(&mut self.cols, c, len.saturating_sub(1));
        }
    }

    /// A value on a column path (`order` of `order.customer.id`): an object, or null.
    fn path(
        &mut self,
        plan: &Plan,
        sc: &mut Scanner<'_>,
        node_id: usize,
        depth: usize,
    ) -> Result<(), DecodeError> {
        match sc.peek_ws() {
            Some(b'{') => self.object(plan, sc, node_id, depth + 1),
            Some(b'n') => {
                sc.literal(b"null")?;
                self.null_all(plan, node_id);
                Ok(())
            }
            b => {
                let at = sc.pos;
                check_value_start(sc, b)?;
                if plan.mismatch == JsonMismatch::Null {
                    sc.skip_value(depth)?;
                    self.null_all(plan, node_id);
                    Ok(())
                } else {
                    Err(DecodeError::new(
                        at,
                        DecodeErrorKind::JsonTypeMismatch {
                            key: plan.nodes[node_id].key.clone(),
                            expected: "an object (it holds requested columns)".into(),
                            found: kind_name(b),
                        },
                    ))
                }
            }
        }
    }

    /// A value of the wrong JSON type at `pos` (not consumed): an error, or a null.
    #[cold]
    #[inline(never)]
    fn mismatch(
        &mut self,
        plan: &Plan,
        sc: &mut Scanner<'_>,
        c: usize,
        depth: usize,
        b: Option<u8>,
    ) -> Result<(), DecodeError> {
        let at = sc.pos;
        check_value_start(sc, b)?;
        sc.skip_value(depth)?;
        self.mismatch_at(plan, c, at, kind_name(b))
    }

    /// A value of the wrong kind, already consumed, that started at `at`.
    #[cold]
    #[inline(never)]
    fn mismatch_at(
        &mut self,
        plan: &Plan,
        c: usize,
        at: usize,
        found: &'static str,
    ) -> Result<(), DecodeError> {
        if plan.mismatch == JsonMismatch::Null {
            push_null(&mut self.cols, c);
            return Ok(());
        }
        let def = &plan.cols[c];
        Err(DecodeError::new(
            at,
            DecodeErrorKind::JsonTypeMismatch {
                key: def.key.clone(),
                expected: def.type_name.clone(),
                found,
            },
        ))
    }

    /// A value of the right kind, already consumed, that does not fit the column.
    #[cold]
    #[inline(never)]
    fn out_of_range(&mut self, plan: &Plan, c: usize, at: usize) -> Result<(), DecodeError> {
        if plan.mismatch == JsonMismatch::Null {
            push_null(&mut self.cols, c);
            return Ok(());
        }
        let def = &plan.cols[c];
        Err(DecodeError::new(
            at,
            DecodeErrorKind::JsonOutOfRange {
                key: def.key.clone(),
                expected: def.type_name.clone(),
            },
        ))
    }

    /// The body of a string value just scanned, unescaped into `scratch` when it has escapes.
    fn string_body<'b>(
        &'b mut self,
        buf: &'b [u8],
        start: usize,
        end: usize,
        escaped: bool,
    ) -> &'b [u8] {
        if escaped {
            self.scratch.clear();
            unescape(&buf[start..end], &mut self.scratch);
            &self.scratch
        } else {
            &buf[start..end]
        }
    }

    /// Reads the value at `pos` (after whitespace) into column `c`; `depth` containers hold it.
    fn value(
        &mut self,
        plan: &Plan,
        sc: &mut Scanner<'_>,
        c: usize,
        depth: usize,
    ) -> Result<(), DecodeError> {
        let b = sc.peek_ws();
        if b == Some(b'n') {
            sc.literal(b"null")?;
            push_null(&mut self.cols, c);
            return Ok(());
        }
        let at = sc.pos;
        let is_number = matches!(b, Some(b'-' | b'0'..=b'9'));

        macro_rules! int {
            ($variant:ident, $t:ty) => {{
                if !is_number {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                let n = sc.number()?;
                if !n.is_int {
                    return self.mismatch_at(plan, c, at, "number with a fraction or exponent");
                }
                match exact_int(&n).and_then(|v| <$t>::try_from(v).ok()) {
                    Some(v) => push!(self, c, $variant, v),
                    None => return self.out_of_range(plan, c, at),
                }
            }};
        }

        match plan.cols[c].kind {
            Kind::I64 => int!(I64, i64),
            Kind::I32 => int!(I32, i32),
            Kind::U32 => int!(U32, u32),
            Kind::U64 => int!(U64, u64),
            Kind::I16 => int!(I16, i16),
            Kind::I8 => int!(I8, i8),
            Kind::U16 => int!(U16, u16),
            Kind::U8 => int!(U8, u8),
            Kind::F64 | Kind::F32 if b == Some(b'"') => {
                // Values JSON numbers cannot hold, as protobuf's JSON mapping writes them.
                let s = sc.string()?;
                let v = match self.string_body(sc.buf, s.start, s.end, s.escaped) {
                    b"NaN" => f64::NAN,
                    b"Infinity" => f64::INFINITY,
                    b"-Infinity" => f64::NEG_INFINITY,
                    _ => {
                        return self.mismatch_at(
                            plan,
                            c,
                            at,
                            "string other than \"NaN\", \"Infinity\" or \"-Infinity\"",
                        )
                    }
                };
                if plan.cols[c].kind == Kind::F64 {
                    push!(self, c, F64, v);
                } else {
                    push!(self, c, F32, v as f32);
                }
            }
            Kind::F64 => {
                if !is_number {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                let n = sc.number()?;
                match to_f64(&n, sc.buf) {
                    Some(v) => push!(self, c, F64, v),
                    None => return self.out_of_range(plan, c, at),
                }
            }
            Kind::F32 => {
                if !is_number {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                let n = sc.number()?;
                match to_f32(&n, sc.buf) {
                    Some(v) => push!(self, c, F32, v),
                    None => return self.out_of_range(plan, c, at),
                }
            }
            Kind::Bool => {
                let v = match b {
                    Some(b't') => {
                        sc.literal(b"true")?;
                        true
                    }
                    Some(b'f') => {
                        sc.literal(b"false")?;
                        false
                    }
                    _ => return self.mismatch(plan, sc, c, depth, b),
                };
                let col = &mut self.cols[c];
                if let Values::Bool(x) = &mut col.values {
                    x.push(v);
                }
                col.valid();
            }
            Kind::Utf8 => {
                let col = &mut self.cols[c];
                let Values::Bytes { offsets, data } = &mut col.values else {
                    return Ok(());
                };
                if b == Some(b'"') {
                    let s = sc.string()?;
                    let body = &sc.buf[s.start..s.end];
                    if s.escaped {
                        unescape(body, data);
                    } else {
                        data.extend_from_slice(body);
                    }
                } else {
                    // Any other value is stored as its JSON text (validated while skipped).
                    sc.skip_value(depth)?;
                    data.extend_from_slice(&sc.buf[at..sc.pos]);
                }
                if !push_offset(offsets, data.len()) {
                    return Err(DecodeError::new(at, DecodeErrorKind::TooLarge));
                }
                col.valid();
            }
            Kind::Timestamp { unit, epoch } => {
                let v = if is_number {
                    let n = sc.number()?;
                    epoch_number(&n, sc.buf, epoch, unit)
                } else if b == Some(b'"') {
                    let s = sc.string()?;
                    let body = self.string_body(sc.buf, s.start, s.end, s.escaped);
                    match rfc3339(body) {
                        Some((secs, nanos)) => secs_to_unit(secs, nanos, unit),
                        None => {
                            return self.mismatch_at(
                                plan,
                                c,
                                at,
                                "string that is not an RFC 3339 date-time",
                            )
                        }
                    }
                } else {
                    return self.mismatch(plan, sc, c, depth, b);
                };
                match v {
                    Some(v) => push!(self, c, I64, v),
                    None => return self.out_of_range(plan, c, at),
                }
            }
            Kind::Date32 | Kind::Date64 => {
                if b != Some(b'"') {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                let s = sc.string()?;
                let body = self.string_body(sc.buf, s.start, s.end, s.escaped);
                let Some(days) = date_days(body) else {
                    return self.mismatch_at(plan, c, at, "string that is not a YYYY-MM-DD date");
                };
                if plan.cols[c].kind == Kind::Date32 {
                    // Four-digit years: always within i32 days.
                    push!(self, c, I32, days as i32);
                } else {
                    push!(self, c, I64, days * 86_400_000);
                }
            }
            Kind::Decimal { precision, scale } => {
                let parsed = if is_number {
                    let n = sc.number()?;
                    exact_decimal(&sc.buf[n.start..n.end])
                } else if b == Some(b'"') {
                    let s = sc.string()?;
                    exact_decimal(self.string_body(sc.buf, s.start, s.end, s.escaped))
                } else {
                    return self.mismatch(plan, sc, c, depth, b);
                };
                match parsed {
                    Ok(x) => match decimal128(x, precision, scale) {
                        Some(v) => push!(self, c, I128, v),
                        None => return self.out_of_range(plan, c, at),
                    },
                    Err(DecimalError::NotANumber) => {
                        return self.mismatch_at(plan, c, at, "string that is not a number")
                    }
                    Err(DecimalError::OutOfRange) => return self.out_of_range(plan, c, at),
                }
            }
            Kind::Struct { node } => {
                if b != Some(b'{') {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                self.object(plan, sc, node, depth + 1)?;
                let col = &mut self.cols[c];
                if let Values::Struct { len, .. } = &mut col.values {
                    *len += 1;
                }
                col.valid();
            }
            Kind::List { child } => {
                if b != Some(b'[') {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                sc.check_depth(depth + 1)?;
                sc.pos += 1;
                if sc.peek_ws() == Some(b']') {
                    sc.pos += 1;
                } else {
                    loop {
                        sc.array_value_start()?;
                        self.value(plan, sc, child, depth + 1)?;
                        if sc.array_next()? {
                            break;
                        }
                    }
                }
                self.close_list(c, child, at)?;
            }
            Kind::Map {
                entries,
                key,
                value,
            } => {
                if b != Some(b'{') {
                    return self.mismatch(plan, sc, c, depth, b);
                }
                sc.check_depth(depth + 1)?;
                sc.pos += 1;
                if sc.peek_ws() == Some(b'}') {
                    sc.pos += 1;
                } else {
                    loop {
                        if sc.peek_ws() != Some(b'"') {
                            return Err(sc.key_expected());
                        }
                        let k = sc.string()?;
                        let kcol = &mut self.cols[key];
                        if let Values::Bytes { offsets, data } = &mut kcol.values {
                            let body = &sc.buf[k.start..k.end];
                            if k.escaped {
                                unescape(body, data);
                            } else {
                                data.extend_from_slice(body);
                            }
                            if !push_offset(offsets, data.len()) {
                                return Err(DecodeError::new(k.start, DecodeErrorKind::TooLarge));
                            }
                        }
                        kcol.valid();
                        sc.expect(b':', "expected ':' after an object key")?;
                        self.value(plan, sc, value, depth + 1)?;
                        if let Values::Struct { len, .. } = &mut self.cols[entries].values {
                            *len += 1;
                        }
                        match sc.peek_ws() {
                            Some(b',') => sc.pos += 1,
                            Some(b'}') => {
                                sc.pos += 1;
                                break;
                            }
                            _ => {
                                return Err(
                                    sc.unexpected("expected ',' or '}' after an object value")
                                )
                            }
                        }
                    }
                }
                self.close_list(c, entries, at)?;
            }
        }
        Ok(())
    }

    /// Ends a List or Map row: its offset is the child's length.
    #[inline]
    fn close_list(&mut self, c: usize, child: usize, at: usize) -> Result<(), DecodeError> {
        let end = self.cols[child].len();
        let col = &mut self.cols[c];
        if let Values::List { offsets, .. } = &mut col.values {
            if !push_offset(offsets, end) {
                return Err(DecodeError::new(at, DecodeErrorKind::TooLarge));
            }
        }
        col.valid();
        Ok(())
    }
}

/// A syntax error unless `b` can start a JSON value (so that garbage is not called a mismatch).
fn check_value_start(sc: &Scanner<'_>, b: Option<u8>) -> Result<(), DecodeError> {
    if kind_name(b) == "invalid value" {
        Err(sc.unexpected("expected a value"))
    } else {
        Ok(())
    }
}
