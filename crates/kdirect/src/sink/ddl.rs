//! A table schema written as Spark SQL's DDL (`id BIGINT NOT NULL, name STRING, tags
//! ARRAY<STRING>`), as Spark's `from_json(value, 'id BIGINT, ...')` and
//! `StructType.fromDDL` take it: the schema
//! [`ArrowConverter::with_json_values`](super::arrow::ArrowConverter::with_json_values)
//! decodes each record's value with (the CLI's `--value-schema`).
//!
//! A column is `name type [NOT NULL] [COMMENT 'text']`, columns separated by commas; names
//! are case-sensitive and may be quoted with backquotes (`` `a b` ``, a backquote in one
//! doubled); type names are not case-sensitive. The types and their Arrow types:
//!
//! | DDL                                   | Arrow                                         |
//! |---------------------------------------|-----------------------------------------------|
//! | `BOOLEAN`                             | boolean                                       |
//! | `TINYINT`, `BYTE`                     | int8                                          |
//! | `SMALLINT`, `SHORT`                   | int16                                         |
//! | `INT`, `INTEGER`                      | int32                                         |
//! | `BIGINT`, `LONG`                      | int64                                         |
//! | `FLOAT`, `REAL`                       | float32                                       |
//! | `DOUBLE`                              | float64                                       |
//! | `DECIMAL(p, s)`, `DEC`, `NUMERIC`     | decimal128(p, s) (`DECIMAL` alone: (10, 0))   |
//! | `STRING`, `VARCHAR(n)`, `CHAR(n)`     | utf8                                          |
//! | `BINARY`                              | binary                                        |
//! | `DATE`                                | date32                                        |
//! | `TIMESTAMP`, `TIMESTAMP_LTZ`          | `timestamp[us, tz=UTC]` (Spark's and Delta's `timestamp`) |
//! | `TIMESTAMP_NTZ`                       | `timestamp[us]` (`timestamp_ntz`)             |
//! | `ARRAY<t>`                            | list of `element: t` (nullable)               |
//! | `MAP<k, v>`                           | map of `key_value: struct<key: k not null, value: v>` |
//! | `STRUCT<a: t, b t, …>`                | struct (the colon is optional, as in Spark)   |
//!
//! A column or struct field is nullable unless `NOT NULL`; array elements and map values are
//! nullable. A `COMMENT` is read and dropped. Anything else (an unknown type, a name given
//! twice, a struct without fields, a precision out of 1..=38) is a
//! [`SinkErrorKind::Spec`] naming the character where it is.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use super::{SinkError, SinkErrorKind};

/// The schema `ddl` describes (see the [module docs](self)).
pub fn parse(ddl: &str) -> Result<SchemaRef, SinkError> {
    let mut p = Parser {
        ddl,
        tokens: tokenize(ddl)?,
        at: 0,
        depth: 0,
    };
    let fields = p.fields(None)?;
    if let Some(t) = p.peek() {
        return Err(p.error_at(
            t.start,
            format!("expected ',' or the end, found {}", t.what()),
        ));
    }
    Ok(Arc::new(Schema::new(fields)))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A name or a keyword (not quoted).
    Word(String),
    /// A backquoted name.
    Quoted(String),
    Number(u64),
    Str,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// Its first character's index in the DDL (in characters, from 0).
    start: usize,
}

impl Token {
    fn what(&self) -> String {
        match &self.tok {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Quoted(w) => format!("`{w}`"),
            Tok::Number(n) => format!("'{n}'"),
            Tok::Str => "a string".to_owned(),
            Tok::Punct(c) => format!("'{c}'"),
        }
    }

    fn keyword(&self, kw: &str) -> bool {
        matches!(&self.tok, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }
}

fn spec_error(ddl: &str, at: usize, reason: String) -> SinkError {
    SinkErrorKind::Spec {
        spec: ddl.to_owned(),
        reason: format!("at character {}: {reason}", at + 1),
    }
    .into()
}

fn tokenize(ddl: &str) -> Result<Vec<Token>, SinkError> {
    let chars: Vec<char> = ddl.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let tok = if word.bytes().all(|b| b.is_ascii_digit()) {
                Tok::Number(word.parse().map_err(|_| {
                    spec_error(ddl, start, format!("the number {word} is too large"))
                })?)
            } else {
                Tok::Word(word)
            };
            out.push(Token { tok, start });
        } else if c == '`' {
            let mut name = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(spec_error(ddl, start, "a `name` that does not end".into()))
                    }
                    Some('`') if chars.get(i + 1) == Some(&'`') => {
                        name.push('`');
                        i += 2;
                    }
                    Some('`') => {
                        i += 1;
                        break;
                    }
                    Some(&c) => {
                        name.push(c);
                        i += 1;
                    }
                }
            }
            out.push(Token {
                tok: Tok::Quoted(name),
                start,
            });
        } else if c == '\'' || c == '"' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(spec_error(ddl, start, "a string that does not end".into()))
                    }
                    Some('\\') => i += 2,
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            out.push(Token {
                tok: Tok::Str,
                start,
            });
        } else if "<>(),:".contains(c) {
            out.push(Token {
                tok: Tok::Punct(c),
                start,
            });
            i += 1;
        } else {
            return Err(spec_error(ddl, start, format!("unexpected '{c}'")));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    ddl: &'a str,
    tokens: Vec<Token>,
    at: usize,
    /// How deep in nested types the parser is (bounded: the parser recurses).
    depth: usize,
}

/// Types nested deeper than this are refused (Spark's own parser has no such bound, but no
/// schema needs it, and the recursion must not overflow the stack on hostile input).
const MAX_DEPTH: usize = 64;

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    /// Where the next token starts, or the end of the DDL.
    fn here(&self) -> usize {
        self.peek()
            .map_or_else(|| self.ddl.chars().count(), |t| t.start)
    }

    fn error_at(&self, at: usize, reason: String) -> SinkError {
        spec_error(self.ddl, at, reason)
    }

    fn unexpected(&self, expected: &str) -> SinkError {
        let found = self
            .peek()
            .map_or_else(|| "the end".to_owned(), Token::what);
        self.error_at(self.here(), format!("expected {expected}, found {found}"))
    }

    fn punct(&mut self, c: char) -> Result<(), SinkError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{c}'")))
        }
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let is = matches!(self.peek(), Some(Token { tok: Tok::Punct(p), .. }) if *p == c);
        if is {
            self.at += 1;
        }
        is
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        let is = self.peek().is_some_and(|t| t.keyword(kw));
        if is {
            self.at += 1;
        }
        is
    }

    fn number(&mut self) -> Result<u64, SinkError> {
        match self.peek() {
            Some(Token {
                tok: Tok::Number(n),
                ..
            }) => {
                let n = *n;
                self.at += 1;
                Ok(n)
            }
            _ => Err(self.unexpected("a number")),
        }
    }

    /// Columns (`close` None) or a struct's fields, up to `close` (not taken).
    fn fields(&mut self, close: Option<char>) -> Result<Vec<Field>, SinkError> {
        let mut fields: Vec<Field> = Vec::new();
        loop {
            let start = self.here();
            let name = match self.next() {
                Some(Token {
                    tok: Tok::Word(w) | Tok::Quoted(w),
                    ..
                }) => w,
                _ => {
                    self.at -= 1;
                    return Err(self.unexpected("a column name"));
                }
            };
            if fields.iter().any(|f| f.name() == &name) {
                return Err(self.error_at(start, format!("'{name}' is named twice")));
            }
            if close.is_some() {
                self.eat_punct(':');
            }
            let data_type = self.data_type()?;
            let nullable = if self.eat_keyword("NOT") {
                if !self.eat_keyword("NULL") {
                    return Err(self.unexpected("NULL after NOT"));
                }
                false
            } else {
                true
            };
            if self.eat_keyword("COMMENT") {
                match self.next() {
                    Some(Token { tok: Tok::Str, .. }) => {}
                    _ => {
                        self.at -= 1;
                        return Err(self.unexpected("a quoted comment"));
                    }
                }
            }
            fields.push(Field::new(name, data_type, nullable));
            if !self.eat_punct(',') {
                break;
            }
        }
        if let Some(c) = close {
            if !matches!(self.peek(), Some(Token { tok: Tok::Punct(p), .. }) if *p == c) {
                return Err(self.unexpected(&format!("',' or '{c}'")));
            }
        }
        Ok(fields)
    }

    fn data_type(&mut self) -> Result<DataType, SinkError> {
        let start = self.here();
        if self.depth >= MAX_DEPTH {
            return Err(self.error_at(start, format!("types nested more than {MAX_DEPTH} deep")));
        }
        self.depth += 1;
        let t = self.data_type_here(start);
        self.depth -= 1;
        t
    }

    fn data_type_here(&mut self, start: usize) -> Result<DataType, SinkError> {
        let word = match self.next() {
            Some(Token {
                tok: Tok::Word(w), ..
            }) => w.to_ascii_uppercase(),
            _ => {
                self.at -= 1;
                return Err(self.unexpected("a type"));
            }
        };
        Ok(match word.as_str() {
            "BOOLEAN" => DataType::Boolean,
            "TINYINT" | "BYTE" => DataType::Int8,
            "SMALLINT" | "SHORT" => DataType::Int16,
            "INT" | "INTEGER" => DataType::Int32,
            "BIGINT" | "LONG" => DataType::Int64,
            "FLOAT" | "REAL" => DataType::Float32,
            "DOUBLE" => DataType::Float64,
            "STRING" => DataType::Utf8,
            "VARCHAR" | "CHAR" => {
                self.punct('(')?;
                self.number()?;
                self.punct(')')?;
                DataType::Utf8
            }
            "BINARY" => DataType::Binary,
            "DATE" => DataType::Date32,
            "TIMESTAMP" | "TIMESTAMP_LTZ" => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            "TIMESTAMP_NTZ" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "DECIMAL" | "DEC" | "NUMERIC" => {
                let (mut p, mut s) = (10, 0);
                if self.eat_punct('(') {
                    p = self.number()?;
                    s = if self.eat_punct(',') {
                        self.number()?
                    } else {
                        0
                    };
                    self.punct(')')?;
                }
                if !(1..=38).contains(&p) || s > p {
                    return Err(self.error_at(
                        start,
                        format!(
                            "DECIMAL({p}, {s}): the precision must be 1 to 38, the scale at \
                             most the precision"
                        ),
                    ));
                }
                // Both fit: p ≤ 38, s ≤ p.
                DataType::Decimal128(p as u8, s as i8)
            }
            "ARRAY" => {
                self.punct('<')?;
                let element = self.data_type()?;
                self.punct('>')?;
                DataType::List(Arc::new(Field::new("element", element, true)))
            }
            "MAP" => {
                self.punct('<')?;
                let key = self.data_type()?;
                self.punct(',')?;
                let value = self.data_type()?;
                self.punct('>')?;
                let entries = Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", key, false),
                        Field::new("value", value, true),
                    ])),
                    false,
                );
                DataType::Map(Arc::new(entries), false)
            }
            "STRUCT" => {
                self.punct('<')?;
                if matches!(
                    self.peek(),
                    Some(Token {
                        tok: Tok::Punct('>'),
                        ..
                    })
                ) {
                    return Err(self.error_at(start, "a STRUCT needs at least one field".into()));
                }
                let fields = self.fields(Some('>'))?;
                self.punct('>')?;
                DataType::Struct(Fields::from(fields))
            }
            other => {
                return Err(self.error_at(
                    start,
                    format!(
                        "unknown type '{other}' (BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, \
                         DOUBLE, DECIMAL(p, s), STRING, BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ, \
                         ARRAY<t>, MAP<k, v>, STRUCT<name: t, ...>)"
                    ),
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(tz: Option<&str>) -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, tz.map(Into::into))
    }

    #[test]
    fn every_type_spark_names_has_its_arrow_type() {
        let s = parse(
            "a BOOLEAN, b tinyint, c BYTE, d SMALLINT, e short, f INT, g Integer, h BIGINT, \
             i LONG, j FLOAT, k REAL, l DOUBLE, m STRING, n VARCHAR(10), o CHAR(2), p BINARY, \
             q DATE, r TIMESTAMP, s TIMESTAMP_LTZ, t TIMESTAMP_NTZ, u DECIMAL(12, 3), \
             v DECIMAL, w NUMERIC(5)",
        )
        .unwrap();
        let types: Vec<DataType> = s.fields().iter().map(|f| f.data_type().clone()).collect();
        use DataType::*;
        assert_eq!(
            types,
            vec![
                Boolean,
                Int8,
                Int8,
                Int16,
                Int16,
                Int32,
                Int32,
                Int64,
                Int64,
                Float32,
                Float32,
                Float64,
                Utf8,
                Utf8,
                Utf8,
                Binary,
                Date32,
                ts(Some("UTC")),
                ts(Some("UTC")),
                ts(None),
                Decimal128(12, 3),
                Decimal128(10, 0),
                Decimal128(5, 0),
            ]
        );
        assert!(s.fields().iter().all(|f| f.is_nullable()));
    }

    #[test]
    fn nested_types_not_null_quoted_names_and_comments() {
        let s = parse(
            "id BIGINT NOT NULL COMMENT 'the id', `odd name` STRING, \
             tags ARRAY<STRING>, attrs MAP<STRING, DOUBLE>, \
             who STRUCT<name: STRING NOT NULL, age INT, `a``b`: ARRAY<STRUCT<x: INT>>>",
        )
        .unwrap();
        let f = s.fields();
        assert_eq!(f[0].name(), "id");
        assert!(!f[0].is_nullable());
        assert_eq!(f[1].name(), "odd name");
        assert_eq!(
            f[2].data_type(),
            &DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)))
        );
        let DataType::Map(entries, false) = f[3].data_type() else {
            panic!("{:?}", f[3])
        };
        let DataType::Struct(kv) = entries.data_type() else {
            panic!("{entries:?}")
        };
        assert_eq!(
            (kv[0].data_type(), kv[0].is_nullable()),
            (&DataType::Utf8, false)
        );
        assert_eq!(kv[1].data_type(), &DataType::Float64);
        let DataType::Struct(who) = f[4].data_type() else {
            panic!("{:?}", f[4])
        };
        assert_eq!(who[0].name(), "name");
        assert!(!who[0].is_nullable());
        assert_eq!(who[1].data_type(), &DataType::Int32);
        assert_eq!(who[2].name(), "a`b");
        assert!(matches!(who[2].data_type(), DataType::List(_)));
    }

    #[test]
    fn bad_ddl_is_an_error_naming_where() {
        for (ddl, says) in [
            ("", "character 1: expected a column name, found the end"),
            ("a", "character 2: expected a type, found the end"),
            ("a INTEGRAL", "character 3: unknown type 'INTEGRAL'"),
            ("a INT, a STRING", "character 8: 'a' is named twice"),
            (
                "a INT b STRING",
                "character 7: expected ',' or the end, found 'b'",
            ),
            (
                "a STRUCT<>",
                "character 3: a STRUCT needs at least one field",
            ),
            ("a STRUCT<x INT", "expected ',' or '>', found the end"),
            ("a ARRAY<INT", "expected '>', found the end"),
            ("a DECIMAL(40, 2)", "character 3: DECIMAL(40, 2)"),
            ("a DECIMAL(5, 6)", "DECIMAL(5, 6)"),
            ("a INT NOT", "expected NULL after NOT"),
            ("`a INT", "a `name` that does not end"),
            ("a INT; DROP", "character 6: unexpected ';'"),
            ("a MAP<STRING>", "expected ',', found '>'"),
            ("a DECIMAL(99999999999999999999999)", "is too large"),
            (
                &format!("a {}INT", "ARRAY<".repeat(100_000)),
                "types nested more than 64 deep",
            ),
            (
                &format!("a {}INT", "STRUCT<x: ".repeat(100_000)),
                "types nested more than 64 deep",
            ),
        ] {
            let e = parse(ddl).unwrap_err().to_string();
            assert!(e.contains(says), "{ddl:?}: {e}");
        }
    }
}
