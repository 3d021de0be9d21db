//! Splits a SQL script into statements and parses weir's own statements (`CREATE SOURCE`,
//! `CREATE SINK`, `INSERT INTO <sink>`). Everything else is handed to DataFusion unchanged.
//!
//! Statements are tokenized with DataFusion's `sqlparser`, so strings, comments and quoted
//! identifiers are handled exactly as DataFusion handles them. Text handed to DataFusion keeps
//! its place in the script (everything before it is blanked out, newlines kept), so DataFusion's
//! "at Line: L, Column: C" positions refer to the script the user wrote.

use datafusion::sql::sqlparser::ast::{DataType as SqlDataType, Ident};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Word};

/// A syntax error, with its line and column in the script.
#[derive(Debug, thiserror::Error)]
#[error("SQL syntax error at line {line}, column {column}: {message}")]
pub struct SqlError {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What was wrong.
    pub message: String,
}

impl SqlError {
    fn at(loc: Location, message: impl Into<String>) -> Self {
        Self {
            line: loc.line,
            column: loc.column,
            message: message.into(),
        }
    }

    fn from_parser(e: ParserError, fallback: Location) -> Self {
        let text = match e {
            ParserError::TokenizerError(s) | ParserError::ParserError(s) => s,
            ParserError::RecursionLimitExceeded => "statement nested too deeply".to_string(),
        };
        // sqlparser appends " at Line: L, Column: C"; lift it into our fields.
        if let Some(i) = text.rfind(" at Line: ") {
            let tail = &text[i + " at Line: ".len()..];
            if let Some((l, c)) = tail.split_once(", Column: ") {
                if let (Ok(line), Ok(column)) = (l.trim().parse(), c.trim().parse()) {
                    return Self {
                        line,
                        column,
                        message: text[..i].to_string(),
                    };
                }
            }
        }
        Self::at(fallback, text)
    }
}

/// A piece of SQL to hand to DataFusion, blank-padded so its positions match the script.
#[derive(Debug, Clone)]
pub struct SqlText {
    /// The padded text.
    pub padded: String,
    /// The text itself, for messages.
    pub text: String,
    /// Where it starts in the script.
    pub start: Location,
}

/// One declared column of a source.
#[derive(Debug, Clone)]
pub struct ColumnDecl {
    /// The column name (unquoted names are lower-cased, as DataFusion does).
    pub name: String,
    /// The SQL type as parsed.
    pub sql_type: SqlDataType,
    /// Where it was declared.
    pub position: Location,
}

/// `INCLUDE <kind> [AS <name>]`: a metadata column.
#[derive(Debug, Clone)]
pub struct IncludeDecl {
    /// What to include (`offset`, `file`, `partition`, ...), lower-cased.
    pub kind: String,
    /// The column name, when given.
    pub alias: Option<String>,
    /// Where it was written.
    pub position: Location,
}

/// `CREATE SOURCE`.
#[derive(Debug, Clone)]
pub struct CreateSource {
    /// The source (table) name.
    pub name: String,
    /// `IF NOT EXISTS` was given.
    pub if_not_exists: bool,
    /// The declared columns.
    pub columns: Vec<ColumnDecl>,
    /// The column list was absent or ended with `...`: add the encoding's remaining columns.
    pub infer_rest: bool,
    /// Metadata columns.
    pub includes: Vec<IncludeDecl>,
    /// `WATERMARK FOR column AS column [- INTERVAL '...']`, if declared.
    pub watermark: Option<WatermarkDecl>,
    /// The `WITH` options, in order.
    pub options: Vec<(String, String)>,
    /// Where the statement starts.
    pub position: Location,
}

/// `WATERMARK FOR column AS column - delay` in a source's column list (RisingWave's syntax).
#[derive(Debug, Clone)]
pub struct WatermarkDecl {
    /// The event-time column.
    pub column: String,
    /// The delay expression (an interval), when the watermark trails the column by one.
    pub delay: Option<String>,
    /// Where it was written.
    pub position: Location,
}

/// `CREATE SINK`.
#[derive(Debug, Clone)]
pub struct CreateSink {
    /// The sink name.
    pub name: String,
    /// `FROM <source>` or `FROM <query>`: what to write now; `None` waits for `INSERT INTO`.
    pub from: Option<SqlText>,
    /// The source's name when `FROM` names a source alone (no query).
    pub source: Option<String>,
    /// The `WITH` options.
    pub options: Vec<(String, String)>,
    /// Where the statement starts.
    pub position: Location,
}

/// One statement of a script.
#[derive(Debug, Clone)]
pub enum Statement {
    /// `CREATE SOURCE`.
    CreateSource(CreateSource),
    /// `CREATE SINK`.
    CreateSink(CreateSink),
    /// `INSERT INTO <name> <query>`; the engine decides whether `name` is a sink.
    Insert {
        /// The target name.
        target: String,
        /// The query after the target.
        query: SqlText,
        /// The whole statement, for DataFusion when the target is not a sink.
        whole: SqlText,
    },
    /// Anything else: DataFusion's.
    Other(SqlText),
}

impl Statement {
    /// The line the statement starts on.
    pub fn line(&self) -> u64 {
        match self {
            Self::CreateSource(s) => s.position.line,
            Self::CreateSink(s) => s.position.line,
            Self::Insert { whole, .. } => whole.start.line,
            Self::Other(text) => text.start.line,
        }
    }
}

/// Splits `script` into statements and parses weir's own.
pub fn parse_script(script: &str) -> Result<Vec<Statement>, SqlError> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, script)
        .tokenize_with_location()
        .map_err(|e| SqlError {
            line: e.location.line,
            column: e.location.column,
            message: e.message,
        })?;
    let index = LineIndex::new(script);
    let mut out = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    for t in tokens
        .into_iter()
        .chain(std::iter::once(TokenWithSpan::wrap(Token::EOF)))
    {
        match t.token {
            Token::SemiColon | Token::EOF => {
                let stmt = std::mem::take(&mut current);
                if stmt.iter().any(|t| !is_blank(&t.token)) {
                    out.push(parse_statement(script, &index, stmt)?);
                }
            }
            _ => current.push(t),
        }
    }
    Ok(out)
}

fn is_blank(t: &Token) -> bool {
    matches!(t, Token::Whitespace(_))
}

fn word(t: &Token) -> Option<&Word> {
    match t {
        Token::Word(w) => Some(w),
        _ => None,
    }
}

fn is_word(t: &Token, text: &str) -> bool {
    word(t).is_some_and(|w| w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text))
}

/// Unquoted identifiers are lower-cased, as DataFusion normalizes them.
fn ident_name(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// Removes `EMIT ON WINDOW CLOSE` (RisingWave's clause for what weir always does: a window's rows
/// are emitted once, when the watermark passes its end).
fn strip_emit_on_window_close(tokens: &mut Vec<TokenWithSpan>) {
    const CLAUSE: [&str; 4] = ["emit", "on", "window", "close"];
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_blank(&tokens[i].token))
        .collect();
    let found = solid.windows(4).find(|w| {
        w.iter()
            .zip(CLAUSE)
            .all(|(&i, c)| is_word(&tokens[i].token, c))
    });
    if let Some(w) = found {
        let (first, last) = (w[0], w[3]);
        tokens.drain(first..=last);
    }
}

fn parse_statement(
    script: &str,
    index: &LineIndex,
    mut tokens: Vec<TokenWithSpan>,
) -> Result<Statement, SqlError> {
    strip_emit_on_window_close(&mut tokens);
    let solid: Vec<&TokenWithSpan> = tokens.iter().filter(|t| !is_blank(&t.token)).collect();
    if solid.is_empty() {
        return Err(SqlError {
            line: 1,
            column: 1,
            message: "EMIT ON WINDOW CLOSE needs a query before it".into(),
        });
    }
    let start = solid[0].span.start;
    let kw = |i: usize, text: &str| solid.get(i).is_some_and(|t| is_word(&t.token, text));
    let whole = || index.text(script, start, solid[solid.len() - 1].span.end);
    if kw(0, "create") && (kw(1, "source") || kw(1, "sink")) {
        let sink = kw(1, "sink");
        let mut p = Parser::new(&GenericDialect {}).with_tokens_with_locations(tokens.clone());
        p.next_token();
        p.next_token();
        return if sink {
            parse_create_sink(&mut p, script, index, start).map(Statement::CreateSink)
        } else {
            parse_create_source(&mut p, start).map(Statement::CreateSource)
        };
    }
    if kw(0, "insert") && kw(1, "into") && solid.len() > 3 {
        if let Some(w) = word(&solid[2].token) {
            let target = ident_name(&Ident {
                value: w.value.clone(),
                quote_style: w.quote_style,
                span: solid[2].span,
            });
            let query = index.text(script, solid[3].span.start, solid[solid.len() - 1].span.end);
            return Ok(Statement::Insert {
                target,
                query,
                whole: whole(),
            });
        }
    }
    Ok(Statement::Other(whole()))
}

fn parse_create_source(p: &mut Parser<'_>, position: Location) -> Result<CreateSource, SqlError> {
    let err = |e: ParserError| SqlError::from_parser(e, position);
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = ident_name(&p.parse_identifier().map_err(err)?);
    let mut columns = Vec::new();
    let mut infer_rest = true;
    let mut watermark = None;
    if p.consume_token(&Token::LParen) {
        infer_rest = false;
        loop {
            let t = p.peek_token();
            if t.token == Token::Period {
                for _ in 0..3 {
                    let t = p.next_token();
                    if t.token != Token::Period {
                        return Err(SqlError::at(t.span.start, "expected '...'"));
                    }
                }
                infer_rest = true;
                let t = p.next_token();
                if t.token != Token::RParen {
                    return Err(SqlError::at(
                        t.span.start,
                        format!("'...' must end the column list, found {}", t.token),
                    ));
                }
                break;
            }
            if is_word(&t.token, "watermark") && is_word(&p.peek_nth_token(1).token, "for") {
                let decl = parse_watermark(p, position)?;
                if watermark.replace(decl).is_some() {
                    return Err(SqlError::at(t.span.start, "a source has one WATERMARK"));
                }
                let t = p.next_token();
                match t.token {
                    Token::Comma => continue,
                    Token::RParen => break,
                    other => {
                        return Err(SqlError::at(
                            t.span.start,
                            format!("expected ',' or ')' after the WATERMARK, found {other}"),
                        ))
                    }
                }
            }
            let ident = p.parse_identifier().map_err(err)?;
            let sql_type = p.parse_data_type().map_err(err)?;
            columns.push(ColumnDecl {
                name: ident_name(&ident),
                sql_type,
                position: ident.span.start,
            });
            let t = p.next_token();
            match t.token {
                Token::Comma => continue,
                Token::RParen => break,
                other => {
                    return Err(SqlError::at(
                        t.span.start,
                        format!(
                            "expected ',' or ')' after column {}, found {other}",
                            ident.value
                        ),
                    ))
                }
            }
        }
    }
    let mut includes = Vec::new();
    while is_word(&p.peek_token().token, "include") {
        let t = p.next_token();
        let kind = p.parse_identifier().map_err(err)?;
        let alias = if p.parse_keyword(Keyword::AS) {
            Some(ident_name(&p.parse_identifier().map_err(err)?))
        } else {
            None
        };
        includes.push(IncludeDecl {
            kind: kind.value.to_lowercase(),
            alias,
            position: t.span.start,
        });
    }
    let options = parse_with(p)?;
    expect_end(p)?;
    Ok(CreateSource {
        name,
        if_not_exists,
        columns,
        infer_rest,
        includes,
        watermark,
        options,
        position,
    })
}

/// `WATERMARK FOR col AS col [- interval]`, the parser at `WATERMARK`.
fn parse_watermark(p: &mut Parser<'_>, position: Location) -> Result<WatermarkDecl, SqlError> {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};
    let err = |e: ParserError| SqlError::from_parser(e, position);
    let at = p.next_token().span.start; // WATERMARK
    p.next_token(); // FOR
    let column = ident_name(&p.parse_identifier().map_err(err)?);
    if !p.parse_keyword(Keyword::AS) {
        return Err(SqlError::at(
            p.peek_token().span.start,
            format!("expected AS after WATERMARK FOR {column}"),
        ));
    }
    let expr = p.parse_expr().map_err(err)?;
    let names = |e: &Expr| match e {
        Expr::Identifier(id) => Some(ident_name(id)),
        _ => None,
    };
    let delay = match &expr {
        e if names(e).as_deref() == Some(column.as_str()) => None,
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if names(left).as_deref() == Some(column.as_str()) => Some(right.to_string()),
        other => {
            return Err(SqlError::at(
                at,
                format!(
                    "WATERMARK FOR {column} AS {other}: write {column} or {column} - INTERVAL '5 seconds'"
                ),
            ))
        }
    };
    Ok(WatermarkDecl {
        column,
        delay,
        position: at,
    })
}

fn parse_create_sink(
    p: &mut Parser<'_>,
    script: &str,
    index: &LineIndex,
    position: Location,
) -> Result<CreateSink, SqlError> {
    let err = |e: ParserError| SqlError::from_parser(e, position);
    let name = ident_name(&p.parse_identifier().map_err(err)?);
    let mut from = None;
    let mut source = None;
    if p.parse_keyword(Keyword::FROM) {
        // The query runs up to the `WITH (` that opens the options at paren depth 0.
        let first = p.peek_token();
        let mut depth = 0i32;
        let mut last_end = first.span.end;
        loop {
            let t = p.peek_token();
            match &t.token {
                Token::EOF => break,
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                Token::Word(w) if depth == 0 && w.keyword == Keyword::WITH && options_follow(p) => {
                    break
                }
                _ => {}
            }
            last_end = t.span.end;
            p.next_token();
        }
        if first.token == Token::EOF || first.span.start == p.peek_token().span.start {
            return Err(SqlError::at(
                first.span.start,
                "expected a source name or a query after FROM",
            ));
        }
        let mut text = index.text(script, first.span.start, last_end);
        // A bare name means the whole source.
        let trimmed = text.text.trim();
        if !trimmed.is_empty()
            && trimmed
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '"' || c == '.')
        {
            // Unquoted names are lower-cased, as DataFusion (and CREATE SOURCE) do.
            source = Some(if trimmed.starts_with('"') {
                trimmed.trim_matches('"').to_string()
            } else {
                trimmed.to_lowercase()
            });
            let select = format!("SELECT * FROM {trimmed}");
            text = SqlText {
                padded: index.pad(script, first.span.start, &select),
                text: select,
                start: first.span.start,
            };
        }
        from = Some(text);
    }
    let options = parse_with(p)?;
    expect_end(p)?;
    Ok(CreateSink {
        name,
        from,
        source,
        options,
        position,
    })
}

/// True when the tokens after the current `WITH` are `( '<string>'`.
fn options_follow(p: &Parser<'_>) -> bool {
    let [_, paren, key] = p.peek_tokens::<3>();
    paren == Token::LParen && matches!(key, Token::SingleQuotedString(_))
}

fn parse_with(p: &mut Parser<'_>) -> Result<Vec<(String, String)>, SqlError> {
    let t = p.next_token();
    if !matches!(&t.token, Token::Word(w) if w.keyword == Keyword::WITH) {
        return Err(SqlError::at(
            t.span.start,
            format!("expected WITH ('connector' = ..., ...), found {}", t.token),
        ));
    }
    let t = p.next_token();
    if t.token != Token::LParen {
        return Err(SqlError::at(
            t.span.start,
            format!("expected '(' after WITH, found {}", t.token),
        ));
    }
    let mut options = Vec::new();
    loop {
        let k = p.next_token();
        let key = match k.token {
            Token::SingleQuotedString(s) => s,
            Token::RParen if options.is_empty() => break,
            other => {
                return Err(SqlError::at(
                    k.span.start,
                    format!("expected an option name in single quotes, found {other}"),
                ))
            }
        };
        let eq = p.next_token();
        if eq.token != Token::Eq {
            return Err(SqlError::at(
                eq.span.start,
                format!("expected '=' after option '{key}', found {}", eq.token),
            ));
        }
        let v = p.next_token();
        let value = match v.token {
            Token::SingleQuotedString(s) => s,
            Token::Number(n, _) => n,
            Token::Word(w) if w.quote_style.is_none() => w.value,
            other => {
                return Err(SqlError::at(
                    v.span.start,
                    format!("expected a value for option '{key}', found {other}"),
                ))
            }
        };
        if options.iter().any(|(k, _)| k == &key) {
            return Err(SqlError::at(
                k.span.start,
                format!("option '{key}' is given twice"),
            ));
        }
        options.push((key, value));
        let sep = p.next_token();
        match sep.token {
            Token::Comma => continue,
            Token::RParen => break,
            other => {
                return Err(SqlError::at(
                    sep.span.start,
                    format!("expected ',' or ')' in WITH, found {other}"),
                ))
            }
        }
    }
    Ok(options)
}

fn expect_end(p: &mut Parser<'_>) -> Result<(), SqlError> {
    let t = p.next_token();
    if t.token == Token::EOF {
        Ok(())
    } else {
        Err(SqlError::at(
            t.span.start,
            format!(
                "unexpected {} after the end of the statement (missing ';'?)",
                t.token
            ),
        ))
    }
}

/// Maps sqlparser locations (1-based line, 1-based column in characters) to byte offsets.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(script: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(script.match_indices('\n').map(|(i, _)| i + 1));
        Self { starts }
    }

    fn byte(&self, script: &str, loc: Location) -> usize {
        let line = (loc.line.max(1) as usize - 1).min(self.starts.len() - 1);
        let start = self.starts[line];
        script[start..]
            .char_indices()
            .nth(loc.column.max(1) as usize - 1)
            .map(|(i, _)| start + i)
            .unwrap_or(script.len())
    }

    /// The text between two locations (`end` exclusive), padded to keep its place.
    fn text(&self, script: &str, start: Location, end: Location) -> SqlText {
        let (a, b) = (self.byte(script, start), self.byte(script, end));
        let text = script[a..b.max(a)].to_string();
        SqlText {
            padded: self.pad(script, start, &text),
            text,
            start,
        }
    }

    /// `text` preceded by blanks standing in for everything before `start`.
    fn pad(&self, script: &str, start: Location, text: &str) -> String {
        let a = self.byte(script, start);
        let mut s: String = script[..a]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        s.push_str(text);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTIONS_QUOTES: &str = "CREATE SOURCE opra_quotes (
    ticker VARCHAR,
    timestamp TIMESTAMP,
    bid_price DOUBLE,
    ask_price DOUBLE,
    ...
) WITH (
    'connector' = 'kafka',
    'encoding'  = 'protobuf',
    'message'   = 'stocks.QuoteNBBO',
    'location'  = '/descriptors/stocks.pb'
);
SELECT ticker, count(*) FROM opra_quotes GROUP BY ticker;";

    #[test]
    fn the_options_quotes_statement_parses_verbatim() {
        let stmts = parse_script(OPTIONS_QUOTES).unwrap();
        assert_eq!(stmts.len(), 2);
        let Statement::CreateSource(s) = &stmts[0] else {
            panic!("{stmts:?}")
        };
        assert_eq!(s.name, "opra_quotes");
        let names: Vec<_> = s.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ticker", "timestamp", "bid_price", "ask_price"]);
        assert!(s.infer_rest);
        assert_eq!(s.options[2], ("message".into(), "stocks.QuoteNBBO".into()));
        let Statement::Other(q) = &stmts[1] else {
            panic!()
        };
        assert_eq!(
            q.text,
            "SELECT ticker, count(*) FROM opra_quotes GROUP BY ticker"
        );
        assert_eq!(q.start.line, 13);
        assert_eq!(q.padded.lines().count(), 13);
        assert!(q.padded.ends_with(&q.text));
    }

    #[test]
    fn includes_sinks_and_inserts() {
        let sql = "create source s (a int) include offset as off include file with ('connector'='file', 'n'=3, 'b'=true);
create sink out from (select a from s where a > 1) with ('connector' = 'parquet', 'path' = 'x.parquet');
create sink t from s with ('connector'='stdout');
create sink u with ('connector'='ipc', 'path'='u.arrow');
insert into u select * from s;";
        let stmts = parse_script(sql).unwrap();
        let Statement::CreateSource(s) = &stmts[0] else {
            panic!()
        };
        assert!(!s.infer_rest);
        assert_eq!(s.includes.len(), 2);
        assert_eq!(s.includes[0].alias.as_deref(), Some("off"));
        assert_eq!(s.options[1], ("n".into(), "3".into()));
        let Statement::CreateSink(k) = &stmts[1] else {
            panic!()
        };
        assert_eq!(
            k.from.as_ref().unwrap().text,
            "(select a from s where a > 1)"
        );
        let Statement::CreateSink(k) = &stmts[2] else {
            panic!()
        };
        assert_eq!(k.from.as_ref().unwrap().text, "SELECT * FROM s");
        let Statement::CreateSink(k) = &stmts[3] else {
            panic!()
        };
        assert!(k.from.is_none());
        let Statement::Insert { target, query, .. } = &stmts[4] else {
            panic!()
        };
        assert_eq!(target, "u");
        assert_eq!(query.text, "select * from s");
    }

    #[test]
    fn watermarks_and_emit_on_window_close() {
        let sql = "CREATE SOURCE q (ticker VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5 seconds', bid DOUBLE) WITH ('connector' = 'file');
SELECT window_start, count(*) FROM TUMBLE(q, ts, INTERVAL '1 minute') GROUP BY window_start, window_end EMIT ON WINDOW CLOSE;
CREATE SINK s FROM (SELECT * FROM q) EMIT ON WINDOW CLOSE WITH ('connector' = 'stdout');";
        let stmts = parse_script(sql).unwrap();
        let Statement::CreateSource(s) = &stmts[0] else {
            panic!()
        };
        let names: Vec<_> = s.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ticker", "ts", "bid"]);
        let w = s.watermark.as_ref().unwrap();
        assert_eq!(
            (w.column.as_str(), w.delay.as_deref()),
            ("ts", Some("INTERVAL '5 seconds'"))
        );
        let Statement::Other(q) = &stmts[1] else {
            panic!()
        };
        assert!(
            q.text.ends_with("GROUP BY window_start, window_end"),
            "{}",
            q.text
        );
        let Statement::CreateSink(k) = &stmts[2] else {
            panic!()
        };
        assert_eq!(k.from.as_ref().unwrap().text, "(SELECT * FROM q)");
        let e = parse_script(
            "CREATE SOURCE q (ts TIMESTAMP, WATERMARK FOR ts AS now()) WITH ('a'='b')",
        )
        .unwrap_err();
        assert!(e.message.contains("ts - INTERVAL"), "{e}");
        let plain =
            parse_script("CREATE SOURCE q (ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH ('a'='b')")
                .unwrap();
        let Statement::CreateSource(s) = &plain[0] else {
            panic!()
        };
        assert!(s.watermark.as_ref().unwrap().delay.is_none());
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse_script("SELECT 1;\nCREATE SOURCE s (a INT, b) WITH ('x'='y');").unwrap_err();
        assert_eq!((e.line, e.column), (2, 26), "{e}");
        let e = parse_script("CREATE SOURCE s (a INT)\n  WITH ('x' 'y')").unwrap_err();
        assert_eq!((e.line, e.column), (2, 13), "{e}");
        assert!(e.message.contains("'='"), "{e}");
        let e = parse_script("CREATE SOURCE s (a INT) WITH ('x'='y', 'x'='z')").unwrap_err();
        assert!(e.message.contains("twice"), "{e}");
        let e = parse_script("SELECT 'unterminated").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }
}
