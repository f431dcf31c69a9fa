//! `NativeFence` (wrapped by the Kotlin `Fence`): the resource side, which refuses writes
//! carrying an older token. Mirrors the other bindings: `fencedExecute`, `fencedSet`, `check`
//! (advisory), `highest`, `close`; a token is a lease or a bare `Long`.

use std::sync::Arc;

use fencelock::{Fence, FenceToken, SqlValue, Statement};

use crate::error::NativeError;
use crate::lease::NativeLease;
use crate::options::{NativeConnectOptions, locker_options, token_from_jvm};
use crate::runtime::{OnDrop, run};

/// Opens the fence of `resource` in the database at `url`; with `tracing`, its writes' spans go
/// to it.
#[uniffi::export]
pub async fn open_fence(
    url: String,
    resource: String,
    options: NativeConnectOptions,
    tracing: Option<Box<dyn crate::spans::NativeSpanSink>>,
) -> Result<Arc<NativeFence>, NativeError> {
    let mut options = locker_options(options)?;
    if let Some(sink) = tracing {
        options = options.with_span_sink(crate::spans::jvm_sink(sink)?);
    }
    let fence = run(
        async move { Fence::open_with(&url, &resource, options).await },
        OnDrop::Cancel,
    )
    .await?;
    Ok(Arc::new(NativeFence { fence }))
}

/// One statement parameter.
#[derive(Debug, Clone, uniffi::Enum)]
pub enum NativeSqlValue {
    Null,
    Integer { value: i64 },
    Real { value: f64 },
    Text { value: String },
    Blob { value: Vec<u8> },
}

#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeStatement {
    pub sql: String,
    pub params: Vec<NativeSqlValue>,
}

impl From<NativeSqlValue> for SqlValue {
    fn from(value: NativeSqlValue) -> Self {
        match value {
            NativeSqlValue::Null => SqlValue::Null,
            NativeSqlValue::Integer { value } => SqlValue::Int(value),
            NativeSqlValue::Real { value } => SqlValue::Float(value),
            NativeSqlValue::Text { value } => SqlValue::Text(value),
            NativeSqlValue::Blob { value } => SqlValue::Bytes(value),
        }
    }
}

impl From<SqlValue> for NativeSqlValue {
    fn from(value: SqlValue) -> Self {
        match value {
            SqlValue::Null => NativeSqlValue::Null,
            SqlValue::Int(value) => NativeSqlValue::Integer { value },
            SqlValue::Float(value) => NativeSqlValue::Real { value },
            SqlValue::Text(value) => NativeSqlValue::Text { value },
            SqlValue::Bytes(value) => NativeSqlValue::Blob { value },
        }
    }
}

fn statements(given: Vec<NativeStatement>) -> Vec<Statement> {
    given
        .into_iter()
        .map(|s| {
            s.params
                .into_iter()
                .fold(Statement::new(s.sql), |statement, p| {
                    statement.bind(p.into())
                })
        })
        .collect()
}

/// A lease (which carries the lock's identity and deadline), or else a bare token.
fn fence_token(
    lease: Option<Arc<NativeLease>>,
    token: Option<i64>,
) -> Result<FenceToken, NativeError> {
    match (lease, token) {
        (Some(lease), _) => Ok(lease.core().fence_token()),
        (None, Some(token)) => Ok(FenceToken::from(token_from_jvm(token)?)),
        (None, None) => Err(crate::error::invalid("a fence needs a lease or a token")),
    }
}

#[derive(uniffi::Object)]
pub struct NativeFence {
    fence: Fence,
}

#[uniffi::export]
impl NativeFence {
    pub fn resource(&self) -> String {
        self.fence.resource().to_string()
    }

    /// Runs `statements` in one transaction if the token is at least the highest accepted;
    /// the rows each statement changed.
    pub async fn fenced_execute(
        &self,
        lease: Option<Arc<NativeLease>>,
        token: Option<i64>,
        statements: Vec<NativeStatement>,
    ) -> Result<Vec<u64>, NativeError> {
        let token = fence_token(lease, token)?;
        let statements = self::statements(statements);
        let fence = self.fence.clone();
        run(
            async move { fence.fenced_execute(token, &statements).await },
            OnDrop::Finish,
        )
        .await
    }

    /// Sets `key` to `value` if the token is at least the highest accepted (Redis fences).
    pub async fn fenced_set(
        &self,
        lease: Option<Arc<NativeLease>>,
        token: Option<i64>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), NativeError> {
        let token = fence_token(lease, token)?;
        let fence = self.fence.clone();
        run(
            async move { fence.fenced_set(token, &key, &value).await },
            OnDrop::Finish,
        )
        .await
    }

    /// Advisory: succeeds if the token would be accepted now, STALE_TOKEN if not.
    pub async fn check(
        &self,
        lease: Option<Arc<NativeLease>>,
        token: Option<i64>,
    ) -> Result<(), NativeError> {
        let token = fence_token(lease, token)?;
        let fence = self.fence.clone();
        run(async move { fence.check(token).await }, OnDrop::Cancel).await
    }

    /// Runs the statement read-only, outside any fenced write; its rows.
    pub async fn query(
        &self,
        statement: NativeStatement,
    ) -> Result<Vec<Vec<NativeSqlValue>>, NativeError> {
        let params: Vec<SqlValue> = statement.params.into_iter().map(Into::into).collect();
        let (sql, fence) = (statement.sql, self.fence.clone());
        let rows = run(
            async move { fence.query(&sql, &params).await },
            OnDrop::Cancel,
        )
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| row.into_iter().map(Into::into).collect())
            .collect())
    }

    /// The highest token accepted so far, or none.
    pub async fn highest(&self) -> Result<Option<i64>, NativeError> {
        let fence = self.fence.clone();
        let highest = run(async move { fence.highest().await }, OnDrop::Cancel).await?;
        Ok(highest.map(|t| t as i64))
    }

    /// (Not `close`: uniffi objects already have a `close()` that frees the native handle.)
    pub async fn shutdown(&self) -> Result<(), NativeError> {
        let fence = self.fence.clone();
        run(
            async move {
                fence.close().await;
                Ok(())
            },
            OnDrop::Finish,
        )
        .await
    }
}
