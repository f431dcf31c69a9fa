//! A value bound to a SQL statement's parameter: used by the SQL lease table's statements and
//! by the statements a SQL fence runs for its caller, so it belongs to neither.

/// A value bound to a statement parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
}
