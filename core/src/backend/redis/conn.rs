//! One connection type for a single Redis and a Redis Cluster, so the lock logic is written
//! once. Both speak RESP3 and carry the pub/sub of waiters on the same connection: plain
//! SUBSCRIBE on one instance, sharded SSUBSCRIBE on a Cluster (the channel lives in the lock's
//! slot). Both re-subscribe by themselves after a reconnect.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// The publish command that matches how waiters subscribe.
    pub fn publish_command(&self) -> &'static str {
        match self {
            Conn::Single(_) => "PUBLISH",
            Conn::Cluster(_) => "SPUBLISH",
        }
    }

    pub async fn subscribe(&self, channel: &str) -> RedisResult<()> {
        match self.clone() {
            Conn::Single(mut c) => c.subscribe(channel).await,
            Conn::Cluster(mut c) => c.ssubscribe(channel).await,
        }
    }

    pub async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        match self.clone() {
            Conn::Single(mut c) => c.unsubscribe(channel).await,
            Conn::Cluster(mut c) => c.sunsubscribe(channel).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
