//! Where locks live in the tree, and what their nodes hold: Apache Curator's protected
//! `InterProcessMutex` layout, so Curator clients queue with fencelock's. The read-write lock's
//! and the semaphore's nodes live in the same folder of the name ([`rwlock`](super::rwlock),
//! [`semaphore`](super::semaphore)), named and filled the same way; their names and folders are
//! read and made here too, so that the queue ([`queue`](super::queue)) and the kind check
//! ([`kinds`](super::kinds)) need no kind's file, and each kind's file needs only this one and
//! the queue: a fourth kind adds its names here and its protocol in a file of its own.
//!
//! ```text
//! [/chroot]/fencelock/<encoded name>/_c_<owner id as a UUID>-lock-<10-digit sequence>
//! ```
//!
//! The folder per lock is a CONTAINER node (the server deletes it once empty); lock nodes are
//! EPHEMERAL_SEQUENTIAL. Node data is JSON with the layout version and the holder's
//! description; Curator writes the client's IP address there instead, and both are read.

use serde_json::Value;

use crate::ids::OwnerId;
use crate::mode::LockMode;
use crate::name::LockName;

/// The version written into node data.
pub const LAYOUT_VERSION: u64 = 1;
/// Curator's lock name for `InterProcessMutex` (`LockInternals` with `"lock-"`).
pub const LOCK_LABEL: &str = "lock-";
/// Curator's protected-mode prefix.
const PROTECTED: &str = "_c_";

/// The folder that holds the queue of one lock.
pub fn lock_folder(root: &str, name: &LockName) -> String {
    format!("{root}/{}", name.encoded())
}

/// The path to create (the server appends the sequence) for `owner`'s node labelled `label`
/// (`lock-` for the mutex, [`LOCK_LABEL`]).
pub fn node_prefix(folder: &str, owner: OwnerId, label: &str) -> String {
    format!("{folder}/{}{label}", owner_prefix(owner))
}

/// `_c_<uuid>-`: how every node of `owner` starts, whatever the recipe (Curator's protected
/// mode); the owner id is new for each acquisition, so it names one node per folder.
pub fn owner_prefix(owner: OwnerId) -> String {
    format!("{PROTECTED}{}-", owner.to_uuid_string())
}

/// The sequence of a lock node's name, read the way Curator does (what follows the last
/// `lock-`); `None` for children that are not lock nodes.
pub fn sequence(child: &str) -> Option<i64> {
    sequence_after(child, LOCK_LABEL)
}

/// What follows the last `label` in `child`, as a sequence: digits only, and not past 2^31
/// (ZooKeeper's per-folder counter is a signed int, spelled with a `-` once it wraps).
pub fn sequence_after(child: &str, label: &str) -> Option<i64> {
    let at = child.rfind(label)?;
    let digits = &child[at + label.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The lock nodes among `children`, in queue order: `(sequence, name)`.
pub fn queue(children: Vec<String>) -> Vec<(i64, String)> {
    let mut nodes: Vec<(i64, String)> = children
        .into_iter()
        .filter_map(|c| sequence(&c).map(|s| (s, c)))
        .collect();
    nodes.sort();
    nodes
}

/// Node data: `{"fencelock":1,"holder":{…}}`.
pub fn node_data(holder_json: &str) -> Vec<u8> {
    let holder: Value = serde_json::from_str(holder_json)
        .unwrap_or_else(|_| Value::String(holder_json.to_string()));
    serde_json::json!({ "fencelock": LAYOUT_VERSION, "holder": holder })
        .to_string()
        .into_bytes()
}

/// The holder's description from node data: fencelock's JSON, or what a Curator client wrote
/// (its IP address) wrapped as `{"curator":"…"}`.
pub fn holder_from_data(data: &[u8]) -> Option<String> {
    if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data)
        && map.contains_key("fencelock")
    {
        return map.get("holder").map(|h| h.to_string());
    }
    if data.is_empty() {
        return None;
    }
    Some(serde_json::json!({ "curator": String::from_utf8_lossy(data) }).to_string())
}

// The read-write lock's nodes (Curator's `InterProcessReadWriteLock`, [`rwlock`](super::rwlock)).

/// Curator's `InterProcessReadWriteLock.READ_LOCK_NAME`.
pub const READ_MARK: &str = "__READ__";
/// Curator's `InterProcessReadWriteLock.WRITE_LOCK_NAME`.
pub const WRITE_MARK: &str = "__WRIT__";

/// One read or write node of a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwNode {
    pub sequence: i64,
    pub write: bool,
    pub name: String,
}

impl RwNode {
    pub fn mode(&self) -> LockMode {
        if self.write {
            LockMode::Write
        } else {
            LockMode::Read
        }
    }
}

/// The marker a node of `mode` carries before its sequence (`None` for the other kinds).
pub fn mark_of(mode: LockMode) -> Option<&'static str> {
    match mode {
        LockMode::Read => Some(READ_MARK),
        LockMode::Write => Some(WRITE_MARK),
        LockMode::Exclusive | LockMode::Permit { .. } => None,
    }
}

/// Reads a child's name as a read or write node: the marker that comes last in it, followed by
/// the sequence and nothing else. `None` for other children, and for a sequence that wrapped
/// past 2^31 (ZooKeeper's per-folder counter is a signed int), which no protocol counts.
pub fn rw_node(child: &str) -> Option<RwNode> {
    let read = child.rfind(READ_MARK);
    let write = child.rfind(WRITE_MARK);
    let (at, is_write) = match (read, write) {
        (Some(r), Some(w)) if w > r => (w, true),
        (Some(r), _) => (r, false),
        (None, Some(w)) => (w, true),
        (None, None) => return None,
    };
    let digits = &child[at + READ_MARK.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(RwNode {
        sequence: digits.parse().ok()?,
        write: is_write,
        name: child.to_string(),
    })
}

/// Whether any child is a read or write node.
pub fn has_rw_nodes(children: &[String]) -> bool {
    children.iter().any(|c| rw_node(c).is_some())
}

/// The read and write nodes among `children`, in lock order (by sequence).
pub fn rw_queue(children: &[String]) -> Vec<RwNode> {
    let mut nodes: Vec<RwNode> = children.iter().filter_map(|c| rw_node(c)).collect();
    nodes.sort_by_key(|n| n.sequence);
    nodes
}

// The semaphore's two folders (Curator's `InterProcessSemaphoreV2`, [`semaphore`](super::semaphore)).

/// Curator's `InterProcessSemaphoreV2.LOCK_PARENT`.
pub const LOCKS: &str = "locks";
/// Curator's `InterProcessSemaphoreV2.LEASE_PARENT`.
pub const LEASES: &str = "leases";
pub fn locks_folder(folder: &str) -> String {
    format!("{folder}/{LOCKS}")
}

pub fn leases_folder(folder: &str) -> String {
    format!("{folder}/{LEASES}")
}

/// Whether a child of a lock folder is one of a semaphore's two folders.
pub fn is_semaphore_folder(child: &str) -> bool {
    child == LOCKS || child == LEASES
}

/// Where a node stands in the queue of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// It holds.
    First,
    /// It waits; the path is the node it watches.
    Behind(String),
    /// Our node is not in the queue (deleted by somebody while we waited).
    Missing,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_sequence_is_not_a_lock_node() {
        // What ZooKeeper names the 2^31st child of a folder: its counter is a signed int.
        assert_eq!(sequence("_c_x-lock--2147483648"), None);
        assert_eq!(sequence("_c_x-lock-2147483647"), Some(2_147_483_647));
    }

    #[test]
    fn curator_names_and_order() {
        let owner = OwnerId::from_bytes([0xab; 16]);
        let name = LockName::new("batch/2024.nightly").unwrap();
        let folder = lock_folder("/fencelock", &name);
        assert_eq!(folder, "/fencelock/batch%2F2024%2Enightly");
        assert_eq!(
            node_prefix(&folder, owner, LOCK_LABEL),
            "/fencelock/batch%2F2024%2Enightly/_c_abababab-abab-abab-abab-abababababab-lock-"
        );
        assert_eq!(
            sequence("_c_abababab-abab-abab-abab-abababababab-lock-0000000042"),
            Some(42)
        );
        assert_eq!(sequence("lock-0000000007"), Some(7));
        assert_eq!(sequence("unrelated"), None);
        assert_eq!(sequence("_c_x-lock-"), None);
        let q = queue(vec![
            "_c_b-lock-0000000010".into(),
            "junk".into(),
            "_c_a-lock-0000000002".into(),
            "_c_c-lock-2147483648".into(),
        ]);
        let names: Vec<&str> = q.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "_c_a-lock-0000000002",
                "_c_b-lock-0000000010",
                "_c_c-lock-2147483648"
            ]
        );
    }

    #[test]
    fn data_round_trips_and_curator_data_is_shown() {
        let data = node_data(r#"{"host":"h","pid":1}"#);
        assert!(
            String::from_utf8(data.clone())
                .unwrap()
                .contains("\"fencelock\":1")
        );
        assert_eq!(holder_from_data(&data).unwrap(), r#"{"host":"h","pid":1}"#);
        assert_eq!(
            holder_from_data(b"10.0.0.7").unwrap(),
            r#"{"curator":"10.0.0.7"}"#
        );
        assert_eq!(holder_from_data(b""), None);
    }
}
