//! `NativeFence` (wrapped by the JS `Fence`): the resource side, which refuses writes carrying
//! an older token. Mirrors the Python binding's `Fence`: `fencedExecute`, `fencedSet`,
//! `check` (advisory), `highest`, `close`; a token is a lease or a bare number.

use fencelock::{Fence, FenceToken, SqlValue, Statement};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{Result, guard, invalid, to_js};
use crate::lease::NativeLease;
use crate::options::{ConnectOptions, locker_options};
use crate::runtime::promise;

/// Opens the fence of `resource` in the database at `url`; resolves to a `NativeFence`. With
/// `tracing`, each fenced write's span is passed to it on the JS thread (see `spans.rs`).
#[napi]
pub fn open_fence(
    env: Env,
    url: String,
    resource: String,
    options: Option<ConnectOptions>,
    tracing: Option<Function<'_, crate::spans::NativeSpan, ()>>,
) -> Result<AsyncBlock<NativeFence>> {
    guard(|| {
        crate::runtime::runtime_setting().map_err(to_js)?;
        let mut options = locker_options(options)?;
        if let Some(callback) = tracing {
            options = options.with_span_sink(crate::spans::js_sink(callback)?);
        }
        promise(&env, async move {
            let fence = Fence::open_with(&url, &resource, options)
                .await
                .map_err(to_js)?;
            Ok(NativeFence { fence })
        })
    })
}

/// One statement parameter, typed by `index.js`: `kind` is null, int (in `text`, decimal, to
/// keep 64 bits), float (in `number`), text (in `text`) or bytes (in `bytes`).
#[napi(object)]
pub struct NativeParam {
    pub kind: String,
    pub text: Option<String>,
    pub number: Option<f64>,
    pub bytes: Option<Buffer>,
}

#[napi(object)]
pub struct NativeStatement {
    pub sql: String,
    pub params: Vec<NativeParam>,
}

fn sql_value(param: NativeParam, at: &str) -> Result<SqlValue> {
    let missing = || invalid(format!("{at}: malformed parameter"));
    Ok(match param.kind.as_str() {
        "null" => SqlValue::Null,
        "int" => {
            let text = param.text.ok_or_else(missing)?;
            SqlValue::Int(text.parse::<i64>().map_err(|_| {
                invalid(format!("{at}: the integer {text} does not fit in 64 bits"))
            })?)
        }
        "float" => SqlValue::Float(param.number.ok_or_else(missing)?),
        "text" => SqlValue::Text(param.text.ok_or_else(missing)?),
        "bytes" => SqlValue::Bytes(param.bytes.ok_or_else(missing)?.to_vec()),
        _ => return Err(missing()),
    })
}

fn statements(given: Vec<NativeStatement>) -> Result<Vec<Statement>> {
    let mut out = Vec::with_capacity(given.len());
    for (i, s) in given.into_iter().enumerate() {
        let mut statement = Statement::new(s.sql);
        for (j, p) in s.params.into_iter().enumerate() {
            statement = statement.bind(sql_value(
                p,
                &format!("parameter {} of statement {}", j + 1, i + 1),
            )?);
        }
        out.push(statement);
    }
    Ok(out)
}

/// A value of a row `query` read, in [`NativeParam`]'s shape (an int as decimal text).
fn native_value(value: SqlValue) -> NativeParam {
    let (kind, text, number, bytes) = match value {
        SqlValue::Null => ("null", None, None, None),
        SqlValue::Int(v) => ("int", Some(v.to_string()), None, None),
        SqlValue::Float(v) => ("float", None, Some(v), None),
        SqlValue::Text(v) => ("text", Some(v), None, None),
        SqlValue::Bytes(v) => ("bytes", None, None, Some(Buffer::from(v))),
    };
    NativeParam {
        kind: kind.to_string(),
        text,
        number,
        bytes,
    }
}

/// A lease, or a bare token as a decimal string (`index.js` checks 0 <= token < 2^63).
fn fence_token(lease: Option<&NativeLease>, token: Option<String>) -> Result<FenceToken> {
    if let Some(lease) = lease {
        return Ok(lease.core().fence_token());
    }
    let text = token.ok_or_else(|| invalid("token must be a Lease or a bigint"))?;
    let token: u64 = text
        .parse()
        .ok()
        .filter(|t| *t < 1 << 63)
        .ok_or_else(|| invalid(format!("token must be between 0 and 2^63 - 1, got {text}")))?;
    Ok(FenceToken::from(token))
}

#[napi]
pub struct NativeFence {
    fence: Fence,
}

#[napi]
impl NativeFence {
    #[napi(getter)]
    pub fn resource(&self) -> Result<String> {
        guard(|| Ok(self.fence.resource().to_string()))
    }

    /// Runs `statements` in one transaction if the token is at least the highest accepted;
    /// resolves to the rows each statement changed.
    #[napi]
    pub fn fenced_execute(
        &self,
        env: Env,
        lease: Option<&NativeLease>,
        token: Option<String>,
        statements: Vec<NativeStatement>,
    ) -> Result<AsyncBlock<Vec<f64>>> {
        guard(|| {
            let token = fence_token(lease, token)?;
            let statements = self::statements(statements)?;
            let fence = self.fence.clone();
            promise(&env, async move {
                let rows = fence
                    .fenced_execute(token, &statements)
                    .await
                    .map_err(to_js)?;
                Ok(rows.into_iter().map(|n| n as f64).collect())
            })
        })
    }

    /// Sets `key` to `value` if the token is at least the highest accepted (Redis fences).
    #[napi]
    pub fn fenced_set(
        &self,
        env: Env,
        lease: Option<&NativeLease>,
        token: Option<String>,
        key: String,
        value: Buffer,
    ) -> Result<AsyncBlock<()>> {
        guard(|| {
            let token = fence_token(lease, token)?;
            let value = value.to_vec();
            let fence = self.fence.clone();
            promise(&env, async move {
                fence.fenced_set(token, &key, &value).await.map_err(to_js)
            })
        })
    }

    /// Advisory: resolves if the token would be accepted now, rejects with STALE_TOKEN if not.
    #[napi]
    pub fn check(
        &self,
        env: Env,
        lease: Option<&NativeLease>,
        token: Option<String>,
    ) -> Result<AsyncBlock<()>> {
        guard(|| {
            let token = fence_token(lease, token)?;
            let fence = self.fence.clone();
            promise(&env, async move { fence.check(token).await.map_err(to_js) })
        })
    }

    /// Runs `sql` read-only, outside any fenced write; resolves to its rows.
    #[napi]
    pub fn query(
        &self,
        env: Env,
        sql: String,
        params: Vec<NativeParam>,
    ) -> Result<AsyncBlock<Vec<Vec<NativeParam>>>> {
        guard(|| {
            let params = params
                .into_iter()
                .enumerate()
                .map(|(j, p)| sql_value(p, &format!("parameter {} of the query", j + 1)))
                .collect::<Result<Vec<_>>>()?;
            let fence = self.fence.clone();
            promise(&env, async move {
                let rows = fence.query(&sql, &params).await.map_err(to_js)?;
                Ok(rows
                    .into_iter()
                    .map(|row| row.into_iter().map(native_value).collect())
                    .collect())
            })
        })
    }

    /// The highest token accepted so far (decimal string), or null.
    #[napi]
    pub fn highest(&self, env: Env) -> Result<AsyncBlock<Option<String>>> {
        guard(|| {
            let fence = self.fence.clone();
            promise(&env, async move {
                Ok(fence.highest().await.map_err(to_js)?.map(|t| t.to_string()))
            })
        })
    }

    #[napi]
    pub fn close(&self, env: Env) -> Result<AsyncBlock<()>> {
        guard(|| {
            let fence = self.fence.clone();
            promise(&env, async move {
                fence.close().await;
                Ok(())
            })
        })
    }
}
