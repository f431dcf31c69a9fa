//! The core's contract (`fencelock::contract`, docs/design.md §9.3) for the JVM tests, which
//! compare it with what the Kotlin layer offers (`src/test/kotlin/dev/fencelock/ContractTest.kt`).
//!
//! Like everything generated into `dev.fencelock.ffi`, these are no part of the public API
//! (users see `dev.fencelock`). They are in every build, not only `test-hooks` ones, because
//! they expose nothing but data and let the tests run on a release library too.

use fencelock::contract::{self, OPTIONS, Operation};
use fencelock::{Error, ErrorCode};

use crate::error::{NativeError, invalid};

/// One option of the core's table, in snake_case as the core spells it.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeContractOption {
    pub name: String,
    /// `duration`, `flag` or `text`.
    pub kind: String,
    /// The default as docs/design.md §4 writes it (`30s`, `forever`, `none`, `false`, …).
    pub default_value: String,
    /// The operations that accept it (`connect`, `acquire`, `try_acquire`, `campaign`,
    /// `open_fence`).
    pub operations: Vec<String>,
    /// The binding sets it itself (`language`) and does not offer it to users.
    pub set_by_binding: bool,
}

/// The core's lists, as the core spells them.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeContract {
    pub error_codes: Vec<String>,
    pub event_kinds: Vec<String>,
    pub operations: Vec<String>,
    pub options: Vec<NativeContractOption>,
}

fn strings(items: impl IntoIterator<Item = &'static str>) -> Vec<String> {
    items.into_iter().map(str::to_string).collect()
}

/// The core's error codes, event kinds, operations and option table.
#[uniffi::export]
pub fn core_contract() -> NativeContract {
    NativeContract {
        error_codes: strings(contract::error_code_names()),
        event_kinds: strings(contract::event_kind_names()),
        operations: strings(Operation::ALL.iter().map(|op| op.as_str())),
        options: OPTIONS
            .iter()
            .map(|spec| NativeContractOption {
                name: spec.name.to_string(),
                kind: spec.kind.as_str().to_string(),
                default_value: spec.default.to_string(),
                operations: strings(spec.operations.iter().map(|op| op.as_str())),
                set_by_binding: spec.set_by_binding,
            })
            .collect(),
    }
}

/// Fails with a core error of `code` (spelled as the core spells it), converted as every error
/// is, so the tests see which exception each code becomes.
#[uniffi::export]
pub fn contract_error(code: String) -> Result<(), NativeError> {
    crate::error::guard(|| {
        let code = ErrorCode::ALL
            .into_iter()
            .find(|c| c.as_str() == code)
            .ok_or_else(|| invalid(format!("no error code {code:?}")))?;
        Err(Error::new(code, "made by contractError").into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_comes_back_as_itself() {
        for code in ErrorCode::ALL {
            match contract_error(code.as_str().to_string()) {
                Err(NativeError::Failure { spelling, .. }) => assert_eq!(spelling, code.as_str()),
                Ok(()) => panic!("{code} did not fail"),
            }
        }
        assert_eq!(core_contract().options.len(), OPTIONS.len());
    }
}
